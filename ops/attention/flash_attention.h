// Flash attention, forward and backward, as tessera kernels (the model: Pallas's TPU flash
// attention, jax.experimental.pallas.ops.tpu.flash_attention).
//
//   namespace fa = tessera::attention;
//   pl::Array o = fa::flash_attention(q, k, v, {.causal = true, .sm_scale = 0.125});
//   fa::Forward f = fa::flash_attention_with_lse(q, k, v, opts);        // o and the logsumexp
//   fa::Gradients g = fa::flash_attention_bwd(q, k, v, f.o, f.lse, dout, opts);
//
// q is [batch, heads, seq_q, head_dim], k and v [batch, heads, seq_k, head_dim], all f32 or all
// bf16; o has q's shape and dtype. o = softmax(mask(cap(q k^T * sm_scale))) v, where
//   - cap(x) = soft_cap * tanh(x / soft_cap) when soft_cap is set;
//   - causal keeps key column c for query row r when c <= r (positions counted from 0 in both, as
//     in the Pallas kernel);
//   - segment_ids keep (r, c) only where q_segment_ids[b, r] == kv_segment_ids[b, c].
// A query row that may attend to no key at all gets an unspecified (finite) row, as in Pallas.
// The logsumexp lse[b, h, r] = log(sum_c exp(logit[r, c])) is f32 [batch, heads, seq_q].
//
// The forward runs on a grid (batch, heads, q blocks, kv blocks) with the kv axis "arbitrary": an
// online softmax keeps the running max m, the running sum l and the f32 accumulator in VMEM scratch,
// so memory is O(seq) — no seq x seq matrix is ever formed. Causal attention skips the kv blocks
// above the diagonal, and its kv index map repeats the last block it needs there, so the skipped
// steps fetch nothing (docs/design.md §4.3). The backward recomputes p per block: one kernel
// accumulates dk and dv over q blocks, another dq over kv blocks.
//
// Block sizes must divide the sequence lengths (a block larger than its sequence is cut to it); an
// unsupported shape is a UserError naming it and the block sizes that fit.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>

#include "dsl/specs.h"
#include "runtime/array.h"

namespace tessera::attention {

struct BlockSizes {
  int64_t block_q = 128;  // query rows per block (forward and the dq kernel)
  int64_t block_k = 128;  // key rows per block
  // The dk/dv kernel's blocks (unset: block_q and block_k).
  std::optional<int64_t> block_q_dkv, block_k_dkv;
};

// Segment ids, i32 [batch, seq_q] and [batch, seq_k]: a query attends only to keys of its segment.
struct SegmentIds {
  Array q;
  Array kv;
};

struct FlashOptions {
  bool causal = false;
  double sm_scale = 1.0;
  std::optional<SegmentIds> segment_ids;
  std::optional<double> soft_cap;  // > 0
  BlockSizes block_sizes{};
  std::optional<InterpretParams> interpret;  // run in the interpreter (also: TESSERA_INTERPRET=1)
  // Run each compiled kernel again in the interpreter and compare (docs/design.md §4.14).
  bool check_against_interpreter = false;
};

struct Forward {
  Array o;
  Array lse;  // f32 [batch, heads, seq_q]
};

struct Gradients {
  Array dq, dk, dv;
};

Array flash_attention(const Array& q, const Array& k, const Array& v, const FlashOptions& options = {},
                      std::source_location loc = std::source_location::current());
Forward flash_attention_with_lse(const Array& q, const Array& k, const Array& v, const FlashOptions& options = {},
                                 std::source_location loc = std::source_location::current());
// The gradients of sum(o * dout) with respect to q, k and v, given the forward's o and lse for the
// same inputs and options. They have the dtypes of q, k and v.
Gradients flash_attention_bwd(const Array& q, const Array& k, const Array& v, const Array& o, const Array& lse,
                              const Array& dout, const FlashOptions& options = {},
                              std::source_location loc = std::source_location::current());

}  // namespace tessera::attention
