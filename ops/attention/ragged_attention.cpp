// The ragged attention kernel: flash attention's online softmax over a packed batch of sequences,
// each q block visiting only the kv blocks of its own sequences (ops/attention/ragged_attention.h).
#include "ops/attention/ragged_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "dsl/control.h"
#include "ops/attention/blocks.h"
#include "ops/library_call.h"

namespace tessera::attention {

namespace {

constexpr const char* kApi = "ragged_attention";

using detail::shape_text;

// What the host derives from cu_seqlens: each token's sequence, and for each q block the first kv
// block it needs and how many (at least one: every row attends to itself).
struct Tables {
  std::vector<int32_t> seq_of_token, kv_first, kv_count;
  int64_t kv_steps = 1;  // the largest count: the kv dim of the grid
};

// The block for `name`: the requested size cut to total_tokens, which it must divide.
int64_t block_for(const char* name, int64_t block, int64_t total, SourceLoc loc) {
  const int64_t b = std::min(block, total);
  if (b >= 1 && total % b == 0) return b;
  throw UserError(fmt::format("{}: {} = {} must be positive and divide total_tokens = {}", kApi, name, block, total),
                  fmt::format("{} = {}, total_tokens = {}", name, block, total),
                  fmt::format("pass a {} that divides {}, or pad the batch with a sequence of padding tokens to a "
                              "multiple of {}",
                              name, total, b >= 1 ? b : 128),
                  loc);
}

Tables tables(const std::vector<int32_t>& cu, const detail::Problem& p) {
  Tables t;
  const int64_t total = p.seq_q;
  t.seq_of_token.resize(static_cast<size_t>(total));
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int32_t r = cu[s]; r < cu[s + 1]; ++r) t.seq_of_token[r] = static_cast<int32_t>(s);
  for (int64_t i = 0; i < p.q_blocks(); ++i) {
    const int64_t first_row = i * p.bq, last_row = first_row + p.bq - 1;
    const int64_t begin = cu[t.seq_of_token[first_row]];
    int64_t end = cu[t.seq_of_token[last_row] + 1];
    if (p.causal) end = std::min(end, last_row + 1);
    t.kv_first.push_back(static_cast<int32_t>(begin / p.bk));
    t.kv_count.push_back(static_cast<int32_t>((end - 1) / p.bk - begin / p.bk + 1));
    t.kv_steps = std::max<int64_t>(t.kv_steps, t.kv_count.back());
  }
  return t;
}

detail::Problem plan(const Array& q, const Array& k, const Array& v, const Array& cu_seqlens, const RaggedOptions& o,
                     SourceLoc loc) {
  if (q.rank() != 3)
    throw UserError(fmt::format("{}: 'q' must be a 3-tensor [total_tokens, heads, head_dim]", kApi),
                    fmt::format("'q' of shape {}", shape_text(q.shape())),
                    "pack the sequences' tokens along the first dim: [total_tokens, heads, head_dim]", loc);
  if (k.rank() != 3 || k.shape() != v.shape() || k.shape()[0] != q.shape()[0] || k.shape()[2] != q.shape()[2] ||
      k.shape()[1] == 0 || q.shape()[1] % k.shape()[1] != 0)
    throw UserError(fmt::format("{}: k and v must be [total_tokens, kv_heads, head_dim] with q's tokens and head_dim, "
                                "and q's heads a multiple of kv_heads",
                                kApi),
                    fmt::format("q {}, k {}, v {}", shape_text(q.shape()), shape_text(k.shape()), shape_text(v.shape())),
                    "pack k and v like q (one key and value per token and kv head)", loc);
  detail::check_float_operand(kApi, q, "q", loc);
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw UserError(fmt::format("{}: q, k and v must have one dtype", kApi),
                    fmt::format("q {}, k {}, v {}", dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype())),
                    "convert them to one dtype (f32 or bf16)", loc);
  detail::Problem p;
  p.batch = 1;
  p.seq_q = p.seq_k = q.shape()[0];
  p.heads = q.shape()[1];
  p.head_dim = q.shape()[2];
  p.dtype = q.dtype();
  p.causal = o.causal;
  p.segments = true;
  if (p.seq_q == 0 || p.heads == 0 || p.head_dim == 0)
    throw UserError(fmt::format("{}: empty operand", kApi), fmt::format("q {}", shape_text(q.shape())),
                    "pass at least one token, head and feature", loc);
  if (cu_seqlens.dtype() != DType::i32 || cu_seqlens.rank() != 1 || cu_seqlens.shape()[0] < 2)
    throw UserError(fmt::format("{}: 'cu_seqlens' must be i32 [num_seqs + 1]", kApi),
                    fmt::format("dtype {}, shape {}", dtype_name(cu_seqlens.dtype()), shape_text(cu_seqlens.shape())),
                    "pass the sequences' start offsets and total_tokens last, e.g. {0, 5, 12} for lengths 5 and 7",
                    loc);
  const std::vector<int32_t> cu = cu_seqlens.to_vector<int32_t>();
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    if (cu[s + 1] < cu[s])
      throw UserError(fmt::format("{}: cu_seqlens decreases at {}: {} then {}", kApi, s + 1, cu[s], cu[s + 1]),
                      fmt::format("cu_seqlens = [{}]", fmt::join(cu, ", ")),
                      "pass running offsets: cu_seqlens[s + 1] = cu_seqlens[s] + length of sequence s", loc);
  if (cu.front() != 0 || cu.back() != p.seq_q)
    throw UserError(fmt::format("{}: cu_seqlens must run from 0 to total_tokens = {}", kApi, p.seq_q),
                    fmt::format("cu_seqlens starts at {} and ends at {}", cu.front(), cu.back()),
                    "start at 0 and end at the number of packed tokens (q's first dim)", loc);
  detail::set_logits_scale(p, kApi, o.sm_scale, o.soft_cap, loc);
  p.bq = block_for("block_q", o.block_q, p.seq_q, loc);
  p.bk = block_for("block_k", o.block_k, p.seq_k, loc);
  return p;
}

// Grid (head h, q block i, kv step j), j arbitrary. kv_first / kv_count (SMEM) give q block i's kv
// blocks; seg_q and seg_kv are the blocks' token sequence ids, which block_logits compares.
void ragged_kernel(const detail::Problem& p, Ref kv_first, Ref kv_count, Ref seg_q, Ref seg_kv, Ref q, Ref k, Ref v,
                   Ref o, Ref m, Ref l, Ref acc) {
  const Value i = program_id(1), j = program_id(2);
  when(j == 0, [&] {
    m() = -std::numeric_limits<float>::infinity();
    l() = 0.0f;
    acc() = 0.0f;
  });
  when(j < kv_count[i], [&] {
    const Value s = detail::block_logits(p, q(), k(), i, kv_first[i] + j, detail::SegmentRefs{seg_q, seg_kv});
    detail::online_softmax_step(m, l, acc, s, v(), p.dtype);
  });
  // Every row attends at least to itself, so l > 0.
  when(j == num_programs(2) - 1, [&] { o() = (acc() / l()).astype(o.dtype()); });
}

CostEstimate ragged_cost(const detail::Problem& p, const Tables& t) {
  int64_t blocks = 0;
  for (int32_t c : t.kv_count) blocks += c;
  const int64_t pairs = p.heads * blocks * p.bq * p.bk, elem = dtype_size(p.dtype);
  return CostEstimate{.flops = 4 * pairs * p.head_dim,
                      .transcendentals = pairs,
                      .bytes_accessed = p.heads * (2 * p.seq_q + 2 * blocks * p.bk) * p.head_dim * elem};
}

}  // namespace

Array ragged_attention(const Array& q, const Array& k, const Array& v, const Array& cu_seqlens, const RaggedOptions& o,
                       std::source_location loc) {
  const detail::Problem p = plan(q, k, v, cu_seqlens, o, loc);
  const Tables t = tables(cu_seqlens.to_vector<int32_t>(), p);
  const int64_t bq = p.bq, bk = p.bk, d = p.head_dim;
  // Grouped-query attention: query head h reads kv head h / group.
  const auto group = static_cast<int32_t>(p.heads / k.shape()[1]);
  // Past its count, a q block's kv steps repeat its last kv block: unchanged, it is not fetched.
  auto kv_block = [](const Value& i, const Value& j, const Ref& first, const Ref& count) {
    return first[i] + minimum(j, count[i] - 1);
  };
  auto kv_map = [kv_block, group](Value h, Value i, Value j, Ref f, Ref c) {
    return idx(kv_block(i, j, f, c), h / group, 0);
  };
  PrefetchScalarGridSpec spec{
      .num_scalar_prefetch = 2,
      .grid = {p.heads, p.q_blocks(), t.kv_steps},
      .in_specs = {BlockSpec({bq}, [](Value, Value i, Value, Ref, Ref) { return i; }),
                   BlockSpec({bk}, [kv_block](Value, Value i, Value j, Ref f, Ref c) { return kv_block(i, j, f, c); }),
                   BlockSpec({bq, squeezed, d}, [](Value h, Value i, Value, Ref, Ref) { return idx(i, h, 0); }),
                   BlockSpec({bk, squeezed, d}, kv_map), BlockSpec({bk, squeezed, d}, kv_map)},
      .out_specs = {BlockSpec({bq, squeezed, d}, [](Value h, Value i, Value, Ref, Ref) { return idx(i, h, 0); })},
      .scratch_shapes = {VMEM({bq, 1}, DType::f32), VMEM({bq, 1}, DType::f32), VMEM({bq, d}, DType::f32)}};
  CallOptions opts = ops::library_call_options({parallel, parallel, arbitrary}, o.interpret, o.check_against_interpreter,
                                               kApi, ragged_cost(p, t));
  // The tables are data, so one trace serves every cu_seqlens with the same number of kv steps.
  const std::string key = fmt::format("{} steps={} group={}", p.key(kApi), t.kv_steps, group);
  PallasCall<std::vector<Array>> call = ops::memoised_call(key, o.interpret, o.check_against_interpreter, loc, [&] {
    return pallas_call(
        [p](Ref first, Ref count, Ref sq, Ref skv, Ref q, Ref k, Ref v, Ref o, Ref m, Ref l, Ref acc) {
          ragged_kernel(p, first, count, sq, skv, q, k, v, o, m, l, acc);
        },
        spec, std::vector<ShapeDtype>{ShapeDtype(q.shape(), q.dtype())}, opts, loc);
  });
  const int64_t q_blocks = p.q_blocks();
  const Array seq_of_token = Array::from_vector(t.seq_of_token, {p.seq_q});
  return call({Array::from_vector(t.kv_first, {q_blocks}), Array::from_vector(t.kv_count, {q_blocks}), seq_of_token,
               seq_of_token, q, k, v},
              loc)
      .at(0);
}

}  // namespace tessera::attention
