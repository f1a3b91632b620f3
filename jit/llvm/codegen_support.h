// Helpers the code generators share: how each dtype is stored and computed on in LLVM IR (bf16 and
// f16 are computed in f32 and rounded to nearest-even after every op, as the runtime does), element
// loads and stores, and counted loops with carried values.
//
// jit/ internal: LLVM types are only forward-declared here.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "jit/ir/dtype.h"

namespace llvm {
class IRBuilderBase;
class Type;
class Value;
}  // namespace llvm

namespace tessera::jit {

// The LLVM type an element is computed in (i1, i8, i16, i32, i64, float, double). LLVM integers have
// no sign: u8/u16/u32/u64 are i8/i16/i32/i64, and each op that depends on the sign picks its unsigned form.
llvm::Type* compute_type(llvm::IRBuilderBase& b, DType t);
// The LLVM type an element is stored as (bool as i8, bf16 as i16, f16 as half).
llvm::Type* storage_type(llvm::IRBuilderBase& b, DType t);
// Loads the element at `ptr` into its compute type.
llvm::Value* load_element(llvm::IRBuilderBase& b, DType t, llvm::Value* ptr);
// Stores a compute-type value (already rounded to `t`) at `ptr`.
void store_element(llvm::IRBuilderBase& b, DType t, llvm::Value* ptr, llvm::Value* value);
// A compute value as the bits memory holds for it (an integer of 8 * dtype_size(t) bits), and an
// element back from those bits, as a store and a load convert: for bitcasts.
llvm::Value* storage_bits(llvm::IRBuilderBase& b, DType t, llvm::Value* value);
llvm::Value* from_storage_bits(llvm::IRBuilderBase& b, DType t, llvm::Value* bits);
// Rounds an f32 compute value to bf16 / f16 precision (identity for other dtypes), by
// runtime/element_rules.h's rules.
llvm::Value* round_to(llvm::IRBuilderBase& b, DType t, llvm::Value* value);
// The address of element `index` (i64) of an array of `t` at `base`.
llvm::Value* element_address(llvm::IRBuilderBase& b, DType t, llvm::Value* base, llvm::Value* index);
// A store of a whole vector, aligned to its size, written past the caches (non-temporal): the
// streaming stores of large outputs, element-wise (codegen_memory.cpp) and from the dot's tiles
// (gemm.cpp). Weakly ordered: fence_nontemporal orders them before anything that follows (another
// thread's read of the output after the launch, a write-back's bookkeeping) may rely on them.
void store_nontemporal(llvm::IRBuilderBase& b, llvm::Value* vector, llvm::Value* address, uint64_t bytes);
void fence_nontemporal(llvm::IRBuilderBase& b);

// for (iv = lo; iv < hi; iv += step) carried = body(iv, carried); returns the final carried values.
// The insertion point ends after the loop.
using LoopBody = std::function<std::vector<llvm::Value*>(llvm::Value* iv, const std::vector<llvm::Value*>& carried)>;
std::vector<llvm::Value*> emit_loop(llvm::IRBuilderBase& b, llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
                                    const std::vector<llvm::Value*>& init, const LoopBody& body);
// A loop over [0, n) of i64 without carried values.
void emit_loop(llvm::IRBuilderBase& b, int64_t n, const std::function<void(llvm::Value* iv)>& body);

}  // namespace tessera::jit
