// The flash attention forward kernel: an online softmax over the kv blocks of each q block.
#include <limits>

#include "dsl/control.h"
#include "ops/attention/blocks.h"

namespace tessera::attention {

namespace {

using detail::Problem;
using detail::SegmentRefs;

// Grid (batch, heads, q block i, kv block j), j arbitrary. m and l are the running max and sum of
// each query row (bq, 1), acc the running p v (bq, head_dim), all f32 scratch that persists over j.
void forward_kernel(const Problem& p, const std::optional<SegmentRefs>& seg, Ref q, Ref k, Ref v, Ref o, Ref lse,
                    Ref m, Ref l, Ref acc) {
  const Value qi = program_id(2), kj = program_id(3);
  when(kj == 0, [&] {
    m() = -std::numeric_limits<float>::infinity();
    l() = 0.0f;
    acc() = 0.0f;
  });
  auto step = [&] {
    detail::online_softmax_step(m, l, acc, detail::block_logits(p, q(), k(), qi, kj, seg), v(), p.dtype);
  };
  // Causal: kv blocks wholly above the diagonal contribute nothing; their steps compute nothing.
  if (p.causal) when(detail::causal_block_needed(p, qi, kj), step);
  else step();
  when(kj == num_programs(3) - 1, [&] {
    Value sum = l();
    o() = (acc() / sum).astype(o.dtype());
    lse() = (m() + log(sum)).reshape({p.bq});
  });
}

CostEstimate forward_cost(const Problem& p) {
  const int64_t pairs = p.batch * p.heads * p.seq_q * p.seq_k / (p.causal ? 2 : 1);
  const int64_t elem = dtype_size(p.dtype), rows_q = p.batch * p.heads * p.seq_q, rows_k = p.batch * p.heads * p.seq_k;
  return CostEstimate{.flops = 4 * pairs * p.head_dim,
                      .transcendentals = pairs,
                      .bytes_accessed = rows_q * p.head_dim * elem * 2 + rows_q * 4 +
                                        rows_k * p.head_dim * elem * 2 * p.q_blocks()};
}

}  // namespace

Forward flash_attention_with_lse(const Array& q, const Array& k, const Array& v, const FlashOptions& o,
                                 std::source_location loc) {
  const Problem p = detail::plan("flash_attention", q, k, v, o, /*dkv=*/false, loc);
  const std::string key = p.key("flash_attention_fwd");
  detail::BlockOf q_block = [](const Value& i, const Value&) { return i; };
  // Causal: past the last kv block a q block needs, repeat that block: unchanged, it is not fetched.
  detail::BlockOf kv_block = [p](const Value& i, const Value& j) {
    return p.causal ? minimum(j, detail::last_kv_block(p, i)) : j;
  };
  std::vector<BlockSpec> in_specs = detail::segment_specs(p, q_block, kv_block);
  in_specs.push_back(detail::row_block_spec(p.bq, p.head_dim, q_block));
  in_specs.push_back(detail::row_block_spec(p.bk, p.head_dim, kv_block));
  in_specs.push_back(detail::row_block_spec(p.bk, p.head_dim, kv_block));
  GridSpec spec{.grid = {p.batch, p.heads, p.q_blocks(), p.k_blocks()},
                .in_specs = std::move(in_specs),
                .out_specs = {detail::row_block_spec(p.bq, p.head_dim, q_block),
                              BlockSpec({squeezed, squeezed, p.bq}, [](Value b, Value h, Value i, Value) { return idx(b, h, i); })},
                .scratch_shapes = {VMEM({p.bq, 1}, DType::f32), VMEM({p.bq, 1}, DType::f32),
                                   VMEM({p.bq, p.head_dim}, DType::f32)}};
  std::vector<ShapeDtype> outs{ShapeDtype(q.shape(), q.dtype()), ShapeDtype({p.batch, p.heads, p.seq_q}, DType::f32)};
  CallOptions opts = detail::call_options(o, "flash_attention_fwd", forward_cost(p));
  PallasCall<std::vector<Array>> call = detail::cached_call(key, o, loc, [&] {
    return detail::call_with_refs<8>(
        p,
        [p](const std::optional<SegmentRefs>& seg, const std::vector<Ref>& r) {
          forward_kernel(p, seg, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
        },
        spec, outs, opts, loc);
  });
  std::vector<Array> args;
  if (o.segment_ids) args = {o.segment_ids->q, o.segment_ids->kv};
  args.insert(args.end(), {q, k, v});
  std::vector<Array> r = call(args, loc);
  return Forward{r.at(0), r.at(1)};
}

Array flash_attention(const Array& q, const Array& k, const Array& v, const FlashOptions& o, std::source_location loc) {
  return flash_attention_with_lse(q, k, v, o, loc).o;
}

}  // namespace tessera::attention
