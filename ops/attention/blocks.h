// What the three flash attention kernels (forward, dk/dv, dq) share: the problem they are
// specialised on, the block logits with their masks (the one home of scale, soft cap, causal and
// segment masking), the causal block ranges their index maps and pl::when guards use, and the
// memoised pallas_calls.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dsl/pallas_call.h"
#include "dsl/ref.h"
#include "dsl/value.h"
#include "ops/attention/flash_attention.h"

namespace tessera::attention::detail {

// The shapes and options a kernel is traced for (everything else arrives as arrays).
struct Problem {
  int64_t batch = 0, heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  int64_t bq = 0, bk = 0;  // the blocks of the kernel at hand
  DType dtype = DType::f32;
  bool causal = false, segments = false;
  float sm_scale = 1.0f;
  std::optional<float> soft_cap;

  int64_t q_blocks() const { return seq_q / bq; }
  int64_t k_blocks() const { return seq_k / bk; }
  std::string key(const char* kernel) const;  // names the specialisation (memo key, call name)
};

// Checks the operands and options of a call (the api's name leads every message) and returns the
// problem with the forward's (or dq kernel's) blocks; `dkv` gives the dk/dv kernel's instead.
Problem plan(const char* api, const Array& q, const Array& k, const Array& v, const FlashOptions& o, bool dkv,
             SourceLoc loc);

// "(2, 3, 4)": a shape as the error messages print it.
std::string shape_text(const Shape& s);
// Checks that operand `name` of `api` is f32 or bf16.
void check_float_operand(const char* api, const Array& a, const char* name, SourceLoc loc);

// Checks sm_scale (finite) and soft_cap (positive, finite) for `api` and sets them on `p`: the
// part of plan() paged attention shares.
void set_logits_scale(Problem& p, const char* api, double sm_scale, std::optional<double> soft_cap, SourceLoc loc);

// The segment-id blocks of a step, when the problem has segment ids: q's (bq) and kv's (bk).
struct SegmentRefs {
  Ref q, kv;
};

// The logits of block (qi, kj): cap(q k^T * sm_scale) in f32, (bq, bk), with the masked entries set
// to kMaskValue. `tanh_out`, when given, receives tanh(x / cap) (soft cap only), which the backward
// needs for the cap's derivative 1 - tanh^2.
Value block_logits(const Problem& p, const Value& q, const Value& k, const Value& qi, const Value& kj,
                   const std::optional<SegmentRefs>& seg, Value* tanh_out = nullptr);
// A large finite negative number rather than -inf (as in Pallas): a row whose block is all masked
// then has a finite max, and exp(s - max) never computes -inf - -inf.
inline constexpr float kMaskValue = -0.7f * 3.4028235e38f;

// The max and the sum of each row of a (rows, cols) f32 block, as (rows, 1): reductions over the
// last axis, which compiled code runs as vector partial accumulators (§4.14). The kernels used to
// fold each row to 16 partials first (a reduction over the middle axis of (rows, cols / 16, 16)),
// from when a last-axis reduction compiled to one scalar chain per row; the fold no longer paid.
Value row_max(const Value& x);
Value row_sum(const Value& x);

// One step of the online softmax over key blocks: folds the (rows, keys) f32 logits `s` and the
// (keys, head_dim) values `v` into the running max m and sum l (rows, 1) and the f32 accumulator
// acc (rows, head_dim). p meets v in `dtype`, as Pallas feeds the MXU: bf16 inputs take the bf16
// dot. The forward of flash attention, paged and ragged attention share it.
void online_softmax_step(const Ref& m, const Ref& l, const Ref& acc, const Value& s, const Value& v, DType dtype);

// Causal: whether kv block kj holds a key that q block qi may attend to, and the last such kv block
// of qi / the first q block that kv block kj serves (clamped into the grid). Index maps clamp the
// block index to them so the skipped steps keep the previous block and fetch nothing.
Value causal_block_needed(const Problem& p, const Value& qi, const Value& kj);
Value last_kv_block(const Problem& p, const Value& qi);
Value first_q_block(const Problem& p, const Value& kj);

// pallas_call options shared by the kernels: (parallel, parallel, parallel, arbitrary), the backend.
CallOptions call_options(const FlashOptions& o, const std::string& name, const CostEstimate& cost);

// The memoised call of a specialisation (compiled calls only; interpreted calls carry their own
// parameters and are made afresh), so a training loop traces each shape once.
PallasCall<std::vector<Array>> cached_call(const std::string& key, const FlashOptions& o, std::source_location loc,
                                           const std::function<PallasCall<std::vector<Array>>()>& make);

// The block specs of the segment ids, when the problem has them: q's at the step's q block, kv's
// at the kv block `kv_block` returns for grid point (b, h, i, j). `q_block` likewise.
using BlockOf = std::function<Value(const Value& i, const Value& j)>;
std::vector<BlockSpec> segment_specs(const Problem& p, const BlockOf& q_block, const BlockOf& kv_block);
// A [batch, heads, seq, head_dim] operand's spec: blocks of `rows` rows at the block `block` returns.
BlockSpec row_block_spec(int64_t rows, int64_t head_dim, const BlockOf& block);

// A pallas_call kernel of exactly sizeof...(I) refs that hands them to `body` as one vector: the
// kernels here take a varying number of refs (segment ids or not; each kernel's outputs and scratch).
template <size_t>
using RefAt = Ref;
template <class Seq, class F>
struct KernelOfRefs;
template <size_t... I, class F>
struct KernelOfRefs<std::index_sequence<I...>, F> {
  F body;
  void operator()(RefAt<I>... refs) const { body(std::vector<Ref>{refs...}); }
};

// pallas_call of body(seg, refs): the kernel takes the segment-id refs first when the problem has
// them, then the N refs `refs` holds (inputs, outputs, scratch).
template <size_t N, class Body>
PallasCall<std::vector<Array>> call_with_refs(const Problem& p, Body body, const GridSpec& spec,
                                              const std::vector<ShapeDtype>& outs, const CallOptions& opts,
                                              std::source_location loc) {
  auto split = [segments = p.segments, body](std::vector<Ref> refs) {
    std::optional<SegmentRefs> seg;
    if (segments) {
      seg = SegmentRefs{refs[0], refs[1]};
      refs.erase(refs.begin(), refs.begin() + 2);
    }
    body(seg, refs);
  };
  using Split = decltype(split);
  if (p.segments)
    return pallas_call(KernelOfRefs<std::make_index_sequence<N + 2>, Split>{split}, spec, outs, opts, loc);
  return pallas_call(KernelOfRefs<std::make_index_sequence<N>, Split>{split}, spec, outs, opts, loc);
}

}  // namespace tessera::attention::detail
