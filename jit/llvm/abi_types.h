// The LLVM types of the kernel ABI, derived from its C++ types (runtime/kernel_abi.h): a kernel's
// type from rt::KernelFunction and each runtime call's from its rt::abi descriptor, so the code
// generator cannot call a runtime function with a signature other than the one the runtime defines.
//
// jit/llvm internal: used by the code generator (codegen.cpp) and its tests.
#pragma once

#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Module.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "runtime/kernel_abi.h"

namespace tessera::jit {

// The C++ types the ABI may use: those that have one LLVM spelling on every target we build for.
template <class T>
inline constexpr bool kAbiScalar =
    std::is_void_v<T> || std::is_pointer_v<T> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

template <class F>
struct AbiSignature {
  static constexpr bool representable = false;
};
template <class R, class... Args>
struct AbiSignature<R(Args...)> {
  static constexpr bool representable = kAbiScalar<R> && (kAbiScalar<Args> && ...) && !(std::is_void_v<Args> || ...);
};

// Every function of the list, and the kernel itself, must be representable: checked here for all of
// them, not only those a test happens to call.
#define TESSERA_RT_FUNCTION(name, ret, params)                                     \
  static_assert(AbiSignature<decltype(rt::abi::name)::Type>::representable,      \
                "tessera_rt_" #name ": the kernel ABI passes int32_t, int64_t and pointers only");
#include "runtime/kernel_abi.def"
#undef TESSERA_RT_FUNCTION
static_assert(AbiSignature<rt::KernelFunction>::representable);

// The LLVM type of an ABI scalar: void, ptr, i32 or i64.
template <class T>
llvm::Type* llvm_abi_type(llvm::LLVMContext& ctx) {
  static_assert(kAbiScalar<T>, "the kernel ABI passes int32_t, int64_t and pointers only");
  if constexpr (std::is_void_v<T>) return llvm::Type::getVoidTy(ctx);
  else if constexpr (std::is_pointer_v<T>) return llvm::PointerType::getUnqual(ctx);
  else return llvm::Type::getIntNTy(ctx, 8 * sizeof(T));
}

template <class F>
struct LlvmFunctionType;
template <class R, class... Args>
struct LlvmFunctionType<R(Args...)> {
  static llvm::FunctionType* get(llvm::LLVMContext& ctx) {
    std::vector<llvm::Type*> params{llvm_abi_type<Args>(ctx)...};
    return llvm::FunctionType::get(llvm_abi_type<R>(ctx), params, /*isVarArg=*/false);
  }
};

// The LLVM function type of C++ function type F (made of ABI scalars).
template <class F>
llvm::FunctionType* llvm_function_type(llvm::LLVMContext& ctx) {
  return LlvmFunctionType<F>::get(ctx);
}

// Declares runtime function `f` in `module` with the LLVM type of its C++ type.
template <class F>
llvm::FunctionCallee declare_abi_function(llvm::Module& module, const rt::AbiFunction<F>& f) {
  return module.getOrInsertFunction(llvm::StringRef(f.symbol.data(), f.symbol.size()),
                                    llvm_function_type<F>(module.getContext()));
}

}  // namespace tessera::jit
