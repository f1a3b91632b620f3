// The flash attention backward: p is recomputed per block from the forward's logsumexp; one kernel
// accumulates dk and dv over the q blocks of each kv block, another dq over the kv blocks of each q
// block (the standard split: each output is owned by one grid row and summed in VMEM scratch).
#include <fmt/format.h>

#include "dsl/control.h"
#include "ops/attention/blocks.h"

namespace tessera::attention {

namespace {

using detail::Problem;
using detail::SegmentRefs;

// The operands every backward step reads: q, k, v, o, dout and lse blocks.
struct BwdRefs {
  Ref q, k, v, o, dout, lse;
};

// p and ds of block (qi, kj): p = exp(logits - lse), ds the gradient of the raw logits q k^T (the
// softmax's, through the soft cap and sm_scale). `di` is rowsum(o * dout), (bq, 1).
struct BlockGrads {
  Value p, ds;
};
BlockGrads block_grads(const Problem& pb, const std::optional<SegmentRefs>& seg, const BwdRefs& r, const Value& qi,
                       const Value& kj, const Value& di) {
  Value t;
  Value s = detail::block_logits(pb, r.q(), r.k(), qi, kj, seg, pb.soft_cap ? &t : nullptr);
  // Masked logits are kMaskValue: their p underflows to 0, and so does their ds.
  Value p = exp(s - r.lse().reshape({pb.bq, 1}));
  Value dp = dot_general(r.dout(), r.v(), DotDimensionNumbers{{{1}, {1}}, {}}, DType::f32);
  Value ds = p * (dp - di);
  if (pb.soft_cap) ds = ds * (1.0f - t * t);  // d/dx cap * tanh(x / cap) = 1 - tanh^2
  if (pb.sm_scale != 1.0f) ds = ds * pb.sm_scale;
  return {p, ds};
}

Value row_dot(const Ref& o, const Ref& dout) {
  return detail::row_sum(o().astype(DType::f32) * dout().astype(DType::f32));
}

// Grid (batch, heads, kv block j, q block i), i arbitrary: dk and dv of kv block j summed in f32
// scratch over the q blocks.
void dkv_kernel(const Problem& pb, const std::optional<SegmentRefs>& seg, const BwdRefs& r, Ref dk, Ref dv,
                Ref dk_acc, Ref dv_acc) {
  const Value kj = program_id(2), qi = program_id(3);
  when(qi == 0, [&] {
    dk_acc() = 0.0f;
    dv_acc() = 0.0f;
  });
  auto step = [&] {
    BlockGrads g = block_grads(pb, seg, r, qi, kj, row_dot(r.o, r.dout));
    // p^T dout and ds^T q: the lhs-transposed form ((0, 0)) reads p and ds in place.
    const DotDimensionNumbers transposed_lhs{{{0}, {0}}, {}};
    dv_acc() += dot_general(g.p.astype(pb.dtype), r.dout(), transposed_lhs, DType::f32);
    dk_acc() += dot_general(g.ds.astype(pb.dtype), r.q(), transposed_lhs, DType::f32);
  };
  if (pb.causal) when(detail::causal_block_needed(pb, qi, kj), step);
  else step();
  when(qi == num_programs(3) - 1, [&] {
    dk() = dk_acc().astype(dk.dtype());
    dv() = dv_acc().astype(dv.dtype());
  });
}

// Grid (batch, heads, q block i, kv block j), j arbitrary: dq of q block i summed over kv blocks;
// rowsum(o * dout) is computed once per q block into `di`.
void dq_kernel(const Problem& pb, const std::optional<SegmentRefs>& seg, const BwdRefs& r, Ref dq, Ref dq_acc,
               Ref di) {
  const Value qi = program_id(2), kj = program_id(3);
  when(kj == 0, [&] {
    dq_acc() = 0.0f;
    di() = row_dot(r.o, r.dout);
  });
  auto step = [&] {
    BlockGrads g = block_grads(pb, seg, r, qi, kj, di());
    dq_acc() += dot(g.ds.astype(pb.dtype), r.k(), DType::f32);
  };
  if (pb.causal) when(detail::causal_block_needed(pb, qi, kj), step);
  else step();
  when(kj == num_programs(3) - 1, [&] { dq() = dq_acc().astype(dq.dtype()); });
}

// The specs of the six operands: q-side blocks (q, o, dout, lse) at q_block, kv-side (k, v) at kv_block.
std::vector<BlockSpec> operand_specs(const Problem& p, const detail::BlockOf& q_block, const detail::BlockOf& kv_block) {
  std::vector<BlockSpec> specs = detail::segment_specs(p, q_block, kv_block);
  BlockSpec qs = detail::row_block_spec(p.bq, p.head_dim, q_block), ks = detail::row_block_spec(p.bk, p.head_dim, kv_block);
  specs.insert(specs.end(), {qs, ks, ks, qs, qs});
  specs.push_back(BlockSpec({squeezed, squeezed, p.bq},
                            [q_block](Value b, Value h, Value i, Value j) { return idx(b, h, q_block(i, j)); }));
  return specs;
}

// `dots` bq x bk x head_dim dots per step, one exp per logit; bytes: the q-side operands (q, o,
// dout, lse) and the kv-side ones (k, v) as often as the grid reads them, and the outputs once.
CostEstimate backward_cost(const Problem& p, bool dkv) {
  const int64_t pairs = p.batch * p.heads * p.seq_q * p.seq_k / (p.causal ? 2 : 1);
  const int64_t elem = dtype_size(p.dtype), q_side = p.batch * p.heads * p.seq_q * (3 * p.head_dim * elem + 4),
                kv_side = 2 * p.batch * p.heads * p.seq_k * p.head_dim * elem;
  const int64_t bytes = dkv ? q_side * p.k_blocks() + 2 * kv_side
                            : kv_side * p.q_blocks() + q_side + p.batch * p.heads * p.seq_q * p.head_dim * elem;
  return CostEstimate{.flops = 2 * (dkv ? 4 : 3) * pairs * p.head_dim, .transcendentals = pairs, .bytes_accessed = bytes};
}

}  // namespace

Gradients flash_attention_bwd(const Array& q, const Array& k, const Array& v, const Array& o, const Array& lse,
                              const Array& dout, const FlashOptions& opt, std::source_location loc) {
  const char* api = "flash_attention_bwd";
  Problem dq_p = detail::plan(api, q, k, v, opt, /*dkv=*/false, loc);
  Problem dkv_p = detail::plan(api, q, k, v, opt, /*dkv=*/true, loc);
  if (o.shape() != q.shape() || dout.shape() != q.shape() || o.dtype() != q.dtype() || dout.dtype() != q.dtype() ||
      lse.shape() != Shape{dq_p.batch, dq_p.heads, dq_p.seq_q} || lse.dtype() != DType::f32)
    throw UserError(fmt::format("{}: o, dout and lse do not fit q", api),
                    fmt::format("q {} {}, o {} {}, dout {} {}, lse {} {}", fmt::join(q.shape(), "x"), dtype_name(q.dtype()),
                                fmt::join(o.shape(), "x"), dtype_name(o.dtype()), fmt::join(dout.shape(), "x"),
                                dtype_name(dout.dtype()), fmt::join(lse.shape(), "x"), dtype_name(lse.dtype())),
                    "pass o and dout of q's shape and dtype and the forward's f32 lse [batch, heads, seq_q]", loc);
  std::vector<Array> args;
  if (opt.segment_ids) args = {opt.segment_ids->q, opt.segment_ids->kv};
  args.insert(args.end(), {q, k, v, o, dout, lse});

  // dk, dv: grid (b, h, kv block, q block). Causal: before the first q block a kv block serves,
  // hold that block, so the skipped steps fetch nothing.
  const Problem& pk = dkv_p;
  detail::BlockOf dkv_q = [pk](const Value& j, const Value& i) {
    return pk.causal ? maximum(i, detail::first_q_block(pk, j)) : i;
  };
  detail::BlockOf dkv_kv = [](const Value& j, const Value&) { return j; };
  GridSpec dkv_spec{.grid = {pk.batch, pk.heads, pk.k_blocks(), pk.q_blocks()},
                    .in_specs = operand_specs(pk, dkv_q, dkv_kv),
                    .out_specs = {detail::row_block_spec(pk.bk, pk.head_dim, dkv_kv),
                                  detail::row_block_spec(pk.bk, pk.head_dim, dkv_kv)},
                    .scratch_shapes = {VMEM({pk.bk, pk.head_dim}, DType::f32), VMEM({pk.bk, pk.head_dim}, DType::f32)}};
  const std::vector<Array> dkv = detail::cached_call(pk.key("flash_attention_dkv"), opt, loc, [&] {
    return detail::call_with_refs<10>(
        pk,
        [pk](const std::optional<SegmentRefs>& seg, const std::vector<Ref>& r) {
          dkv_kernel(pk, seg, BwdRefs{r[0], r[1], r[2], r[3], r[4], r[5]}, r[6], r[7], r[8], r[9]);
        },
        dkv_spec, {ShapeDtype(k.shape(), k.dtype()), ShapeDtype(v.shape(), v.dtype())},
        detail::call_options(opt, "flash_attention_dkv", backward_cost(pk, /*dkv=*/true)), loc);
  })(args, loc);

  // dq: grid (b, h, q block, kv block), the forward's.
  const Problem& pq = dq_p;
  detail::BlockOf dq_q = [](const Value& i, const Value&) { return i; };
  detail::BlockOf dq_kv = [pq](const Value& i, const Value& j) {
    return pq.causal ? minimum(j, detail::last_kv_block(pq, i)) : j;
  };
  GridSpec dq_spec{.grid = {pq.batch, pq.heads, pq.q_blocks(), pq.k_blocks()},
                   .in_specs = operand_specs(pq, dq_q, dq_kv),
                   .out_specs = {detail::row_block_spec(pq.bq, pq.head_dim, dq_q)},
                   .scratch_shapes = {VMEM({pq.bq, pq.head_dim}, DType::f32), VMEM({pq.bq, 1}, DType::f32)}};
  const std::vector<Array> dq = detail::cached_call(pq.key("flash_attention_dq"), opt, loc, [&] {
    return detail::call_with_refs<9>(
        pq,
        [pq](const std::optional<SegmentRefs>& seg, const std::vector<Ref>& r) {
          dq_kernel(pq, seg, BwdRefs{r[0], r[1], r[2], r[3], r[4], r[5]}, r[6], r[7], r[8]);
        },
        dq_spec, {ShapeDtype(q.shape(), q.dtype())}, detail::call_options(opt, "flash_attention_dq", backward_cost(pq, /*dkv=*/false)),
        loc);
  })(args, loc);
  return Gradients{dq.at(0), dkv.at(0), dkv.at(1)};
}

}  // namespace tessera::attention
