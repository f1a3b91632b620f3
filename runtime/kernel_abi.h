// The C ABI between compiled kernels and the runtime: the kernel's type (rt::KernelFunction), the
// runtime functions it calls (declared from the list in runtime/kernel_abi.def), their descriptors
// for the code generator (rt::abi::<name>) and the symbol table the JIT binds them from.
//
// A compiled kernel has the uniform signature
//     void kernel(void* const* operands, int64_t first_step, int64_t end_step, CoreContext* core)
// (operands: the data pointers of the kernel's ref parameters, in order). It calls the functions
// below by symbol, never by address, so a cached object file stays valid in another process. Ops
// are named by their index in the lowered IR (`op`), from which the runtime learns shapes, dtypes,
// names and source lines; the rules themselves (block copies, poison, revisits, messages) are the
// same code the interpreter runs.
//
// A function returning int32_t returns non-zero after recording a failure in the core context:
// the kernel then returns at once, and the host throws the failure after the launch. No exception
// ever crosses into compiled code: the functions record it as the core's failure instead (an
// allocation that fails returns null, which the kernel notices at its first check).
//
// Runtime layer; used by runtime/kernel_abi.cpp (the definitions), jit/llvm/engine.cpp (the
// symbol table) and jit/llvm (the types of the calls and of the kernel).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::rt {
struct CoreContext;

// The type of a compiled kernel (the code generator emits it with this LLVM type).
using KernelFunction = void(void* const* operands, int64_t first_step, int64_t end_step, CoreContext* core);
}  // namespace tessera::rt

extern "C" {
#define TESSERA_RT_FUNCTION(name, ret, params) ret tessera_rt_##name params;
#include "runtime/kernel_abi.def"
#undef TESSERA_RT_FUNCTION
}

namespace tessera::rt {

// A runtime entry point of C++ type F: its symbol and its address.
template <class F>
struct AbiFunction {
  using Type = F;
  std::string_view symbol;
  F* address;
};

// rt::abi::<name>: the descriptor of tessera_rt_<name>, for the code generator to declare it with
// the same type.
namespace abi {
#define TESSERA_RT_FUNCTION(name, ret, params) \
  inline constexpr AbiFunction<ret params> name{"tessera_rt_" #name, &::tessera_rt_##name};
#include "runtime/kernel_abi.def"
#undef TESSERA_RT_FUNCTION
}  // namespace abi

// A compiled kernel's entry point, as the launcher calls it.
using KernelEntry = KernelFunction*;

// The ABI functions by name, for the JIT to bind.
std::vector<std::pair<std::string_view, void*>> kernel_abi_symbols();

}  // namespace tessera::rt
