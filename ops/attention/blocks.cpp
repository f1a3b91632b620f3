#include "ops/attention/blocks.h"

#include <fmt/format.h>

#include <cmath>

#include "ops/library_call.h"

namespace tessera::attention::detail {

std::string shape_text(const Shape& s) { return fmt::format("({})", fmt::join(s, ", ")); }

void check_float_operand(const char* api, const Array& a, const char* name, SourceLoc loc) {
  if (a.dtype() != DType::f32 && a.dtype() != DType::bf16)
    throw UserError(fmt::format("{}: '{}' must be f32 or bf16", api, name), fmt::format("dtype {}", dtype_name(a.dtype())),
                    fmt::format("convert it first: {}.astype(pl::bf16)", name), loc);
}

namespace {

void check_operand(const char* api, const Array& a, const char* name, SourceLoc loc) {
  if (a.rank() != 4)
    throw UserError(fmt::format("{}: '{}' must be a 4-tensor [batch, heads, seq, head_dim]", api, name),
                    fmt::format("'{}' of shape {}", name, shape_text(a.shape())),
                    fmt::format("reshape '{}' to [batch, heads, seq, head_dim]", name), loc);
  check_float_operand(api, a, name, loc);
}

void check_segment_ids(const char* api, const Array& ids, const char* name, int64_t batch, int64_t seq, SourceLoc loc) {
  if (ids.dtype() != DType::i32 || ids.shape() != Shape{batch, seq})
    throw UserError(fmt::format("{}: segment ids '{}' must be i32 [batch, seq] = ({}, {})", api, name, batch, seq),
                    fmt::format("dtype {}, shape {}", dtype_name(ids.dtype()), shape_text(ids.shape())),
                    fmt::format("pass an i32 array of shape ({}, {})", batch, seq), loc);
}

// The block for a sequence: the requested size cut to the sequence, which it must divide.
int64_t block_for(const char* api, const char* block_name, int64_t block, const char* seq_name, int64_t seq,
                  const Shape& shape, SourceLoc loc) {
  if (block < 1)
    throw UserError(fmt::format("{}: {} must be positive", api, block_name), fmt::format("{} = {}", block_name, block),
                    fmt::format("pass e.g. {} = 128", block_name), loc);
  const int64_t b = std::min(block, seq);
  if (seq % b == 0) return b;
  int64_t fits = b;
  while (seq % fits != 0) --fits;
  throw UserError(fmt::format("{}: {} = {} does not divide {} = {}", api, block_name, b, seq_name, seq),
                  fmt::format("an operand of shape {} with {} = {}", shape_text(shape), block_name, b),
                  fmt::format("pass a {} that divides {} (the largest up to {} is {}), or pad the sequence to a "
                              "multiple of {}",
                              block_name, seq, b, fits, b),
                  loc);
}

}  // namespace

std::string Problem::key(const char* kernel) const {
  return fmt::format("{} b={} h={} sq={} sk={} d={} blocks=({},{}) {} causal={} seg={} scale={} cap={}", kernel, batch,
                     heads, seq_q, seq_k, head_dim, bq, bk, dtype_name(dtype), causal, segments, sm_scale,
                     soft_cap ? *soft_cap : 0.0f);
}

Problem plan(const char* api, const Array& q, const Array& k, const Array& v, const FlashOptions& o, bool dkv,
             SourceLoc loc) {
  check_operand(api, q, "q", loc);
  check_operand(api, k, "k", loc);
  check_operand(api, v, "v", loc);
  const Shape& qs = q.shape();
  if (k.shape() != v.shape() || k.shape()[0] != qs[0] || k.shape()[1] != qs[1] || k.shape()[3] != qs[3])
    throw UserError(fmt::format("{}: q, k and v do not fit together", api),
                    fmt::format("q {}, k {}, v {}", shape_text(qs), shape_text(k.shape()), shape_text(v.shape())),
                    "k and v are [batch, heads, seq_k, head_dim] with q's batch, heads and head_dim", loc);
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw UserError(fmt::format("{}: q, k and v must have one dtype", api),
                    fmt::format("q {}, k {}, v {}", dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype())),
                    "convert them to one dtype (f32 or bf16)", loc);
  Problem p;
  p.batch = qs[0];
  p.heads = qs[1];
  p.seq_q = qs[2];
  p.seq_k = k.shape()[2];
  p.head_dim = qs[3];
  p.dtype = q.dtype();
  if (p.seq_q == 0 || p.seq_k == 0 || p.head_dim == 0)
    throw UserError(fmt::format("{}: empty sequence or head dim", api),
                    fmt::format("q {}, k {}", shape_text(qs), shape_text(k.shape())),
                    "pass at least one query, one key and one feature", loc);
  p.causal = o.causal;
  set_logits_scale(p, api, o.sm_scale, o.soft_cap, loc);
  if (o.segment_ids) {
    check_segment_ids(api, o.segment_ids->q, "q", p.batch, p.seq_q, loc);
    check_segment_ids(api, o.segment_ids->kv, "kv", p.batch, p.seq_k, loc);
    p.segments = true;
  }
  const BlockSizes& b = o.block_sizes;
  p.bq = block_for(api, dkv ? "block_q_dkv" : "block_q", dkv ? b.block_q_dkv.value_or(b.block_q) : b.block_q, "seq_q",
                   p.seq_q, qs, loc);
  p.bk = block_for(api, dkv ? "block_k_dkv" : "block_k", dkv ? b.block_k_dkv.value_or(b.block_k) : b.block_k, "seq_k",
                   p.seq_k, k.shape(), loc);
  return p;
}

void set_logits_scale(Problem& p, const char* api, double sm_scale, std::optional<double> soft_cap, SourceLoc loc) {
  if (!std::isfinite(sm_scale))
    throw UserError(fmt::format("{}: sm_scale must be finite", api), fmt::format("sm_scale = {}", sm_scale),
                    "pass e.g. 1 / sqrt(head_dim)", loc);
  p.sm_scale = static_cast<float>(sm_scale);
  if (soft_cap) {
    if (!(*soft_cap > 0) || !std::isfinite(*soft_cap))
      throw UserError(fmt::format("{}: soft_cap must be positive and finite", api),
                      fmt::format("soft_cap = {}", *soft_cap), "pass e.g. 30.0, or leave soft_cap unset", loc);
    p.soft_cap = static_cast<float>(*soft_cap);
  }
}

Value block_logits(const Problem& p, const Value& q, const Value& k, const Value& qi, const Value& kj,
                   const std::optional<SegmentRefs>& seg, Value* tanh_out) {
  // q k^T: the rhs-transposed form ((1, 1)) reads k's block in place (docs/design.md §8).
  Value s = dot_general(q, k, DotDimensionNumbers{{{1}, {1}}, {}}, DType::f32);
  if (p.sm_scale != 1.0f) s = s * p.sm_scale;
  if (p.soft_cap) {
    Value t = tanh(s * (1.0f / *p.soft_cap));
    if (tanh_out) *tanh_out = t;
    s = t * *p.soft_cap;
  }
  const Shape shape{p.bq, p.bk};
  std::optional<Value> keep;
  if (p.causal) {
    Value rows = iota(shape, 0) + qi * static_cast<int32_t>(p.bq);
    Value cols = iota(shape, 1) + kj * static_cast<int32_t>(p.bk);
    keep = cols <= rows;
  }
  if (seg) {
    Value same = seg->q().reshape({p.bq, 1}) == seg->kv().reshape({1, p.bk});
    keep = keep ? (*keep && same) : same;
  }
  return keep ? where(*keep, s, kMaskValue) : s;
}

Value row_max(const Value& x) { return x.max(1, /*keepdims=*/true); }

Value row_sum(const Value& x) { return x.sum(1, /*keepdims=*/true); }

void online_softmax_step(const Ref& m, const Ref& l, const Ref& acc, const Value& s, const Value& v, DType dtype) {
  Value m_prev = m();
  Value m_next = maximum(m_prev, row_max(s));
  Value pr = exp(s - m_next);
  // What the sums so far are worth at the new max (0 on the first block: m_prev is -inf).
  Value alpha = exp(m_prev - m_next);
  l() = alpha * l() + row_sum(pr);
  m() = m_next;
  acc() *= alpha;
  acc() += dot(pr.astype(dtype), v, DType::f32);
}

Value causal_block_needed(const Problem& p, const Value& qi, const Value& kj) {
  return kj * static_cast<int32_t>(p.bk) <= qi * static_cast<int32_t>(p.bq) + static_cast<int32_t>(p.bq - 1);
}

Value last_kv_block(const Problem& p, const Value& qi) {
  Value last = (qi * static_cast<int32_t>(p.bq) + static_cast<int32_t>(p.bq - 1)) / static_cast<int32_t>(p.bk);
  return minimum(last, static_cast<int32_t>(p.k_blocks() - 1));
}

Value first_q_block(const Problem& p, const Value& kj) {
  return minimum(kj * static_cast<int32_t>(p.bk) / static_cast<int32_t>(p.bq), static_cast<int32_t>(p.q_blocks() - 1));
}

CallOptions call_options(const FlashOptions& o, const std::string& name, const CostEstimate& cost) {
  return ops::library_call_options({parallel, parallel, parallel, arbitrary}, o.interpret, o.check_against_interpreter,
                                   name, cost);
}

PallasCall<std::vector<Array>> cached_call(const std::string& key, const FlashOptions& o, std::source_location loc,
                                           const std::function<PallasCall<std::vector<Array>>()>& make) {
  return ops::memoised_call(key, o.interpret, o.check_against_interpreter, loc, make);
}

std::vector<BlockSpec> segment_specs(const Problem& p, const BlockOf& q_block, const BlockOf& kv_block) {
  if (!p.segments) return {};
  return {BlockSpec({squeezed, p.bq}, [q_block](Value b, Value, Value i, Value j) { return idx(b, q_block(i, j)); }),
          BlockSpec({squeezed, p.bk}, [kv_block](Value b, Value, Value i, Value j) { return idx(b, kv_block(i, j)); })};
}

BlockSpec row_block_spec(int64_t rows, int64_t head_dim, const BlockOf& block) {
  return BlockSpec({squeezed, squeezed, rows, head_dim},
                   [block](Value b, Value h, Value i, Value j) { return idx(b, h, block(i, j), 0); });
}

}  // namespace tessera::attention::detail
