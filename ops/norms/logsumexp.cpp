// logsumexp over column blocks: the online max-sum (the flash attention forward's, without the
// values): m and l of each row live in f32 VMEM scratch across the arbitrary column axis; a new
// block's max rescales the sum so far by exp(m_prev - m_next). The padding of a partial last block
// is -inf, which adds exp(-inf) = 0. Logits of -inf are masked entries and count as such: a row
// is NaN only when all of it is -inf, as with one block.
#include "ops/norms/logsumexp.h"

#include <fmt/format.h>

#include <limits>
#include <optional>

#include "dsl/control.h"

namespace tessera::norms::detail {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Whether each element of column block j is the label of its row (labels: the (br) block of i32).
Value is_label(const Rows& r, const Value& j, const Ref& labels) {
  return column_index(r, j) == labels().reshape({r.br, 1});
}

void lse_body(const Rows& r, Ref x, std::optional<Ref> labels, Ref lse, std::optional<Ref> loss, Ref m, Ref l,
              std::optional<Ref> picked) {
  const Value j = program_id(1);
  when(j == 0, [&] {
    m() = -kInf;
    l() = 0.0f;
    if (picked) (*picked)() = 0.0f;
  });
  Value xb = masked_columns(r, x(), j, -kInf);
  Value m_prev = m();
  Value m_next = maximum(m_prev, xb.max(1, /*keepdims=*/true));
  // A row whose blocks so far are all -inf (masked logits) has m_next = -inf, and -inf - -inf is
  // NaN: subtract 0 instead, so those blocks add exp(-inf) = 0 and the sum so far (0) stays 0.
  Value shift = where(m_next == -kInf, 0.0f, m_next);
  l() = exp(m_prev - shift) * l() + exp(xb - shift).sum(1, /*keepdims=*/true);
  m() = m_next;
  // The label's logit: the one element of the row (in one of its column blocks) whose column matches.
  if (picked) (*picked)() += where(is_label(r, j, *labels), xb, 0.0f).sum(1, /*keepdims=*/true);
  when(j == static_cast<int32_t>(r.col_blocks() - 1), [&] {
    Value s = m() + log(l());
    lse() = s.reshape({r.br});
    if (loss) (*loss)() = (s - (*picked)()).reshape({r.br});
  });
}

}  // namespace

std::vector<int64_t> column_grid(const Rows& r) { return {r.row_blocks(), r.col_blocks()}; }
BlockSpec column_block_spec(const Rows& r) {
  return BlockSpec({r.br, r.bc}, [](Value i, Value j) { return idx(i, j); });
}
BlockSpec column_stat_spec(const Rows& r) {
  return BlockSpec({r.br}, [](Value i, Value) { return idx(i); });
}

std::vector<Array> row_logsumexp(const Rows& r, const Array& x, const Array* labels, const Options& o, std::source_location loc) {
  const int64_t elems = r.rows * r.width;
  std::vector<ShapeDtype> outs{ShapeDtype({r.rows}, DType::f32)};
  std::vector<BlockSpec> in_specs{column_block_spec(r)}, out_specs{column_stat_spec(r)};
  std::vector<ScratchShape> scratch{VMEM({r.br, 1}, DType::f32), VMEM({r.br, 1}, DType::f32)};
  if (labels) {
    in_specs.push_back(column_stat_spec(r));
    out_specs.push_back(column_stat_spec(r));
    outs.push_back(ShapeDtype({r.rows}, DType::f32));
    scratch.push_back(VMEM({r.br, 1}, DType::f32));
  }
  PallasCall<std::vector<Array>> call = cached_call(r.key(labels ? "cross_entropy_fwd" : "logsumexp"), o, loc, [&] {
    GridSpec spec{.grid = column_grid(r), .in_specs = in_specs, .out_specs = out_specs, .scratch_shapes = scratch};
    CallOptions opts = call_options(o, {parallel, arbitrary}, labels ? "cross_entropy_fwd" : "logsumexp",
                                    CostEstimate{.flops = 4 * elems, .transcendentals = elems,
                                                 .bytes_accessed = elems * dtype_size(r.dtype)});
    if (labels)
      return pallas_call([r](Ref xr, Ref lab, Ref lse, Ref loss, Ref m, Ref l, Ref picked) {
        lse_body(r, xr, lab, lse, loss, m, l, picked);
      }, spec, outs, opts, loc);
    return pallas_call([r](Ref xr, Ref lse, Ref m, Ref l) {
      lse_body(r, xr, std::nullopt, lse, std::nullopt, m, l, std::nullopt);
    }, spec, outs, opts, loc);
  });
  std::vector<Array> args{x};
  if (labels) args.push_back(*labels);
  return call(args, loc);
}

Array probabilities(const Rows& r, const Array& x, const Array& lse, const Array* labels, const Array* dloss,
                    const Options& o, std::source_location loc) {
  const bool grad = labels != nullptr;
  const int64_t elems = r.rows * r.width;
  std::vector<BlockSpec> in_specs{column_block_spec(r), column_stat_spec(r)};
  if (grad) in_specs.insert(in_specs.end(), {column_stat_spec(r), column_stat_spec(r)});
  const char* name = grad ? "cross_entropy_bwd" : "softmax_probabilities";
  PallasCall<std::vector<Array>> call = cached_call(r.key(name), o, loc, [&] {
    GridSpec spec{.grid = column_grid(r), .in_specs = in_specs, .out_specs = {column_block_spec(r)}};
    CallOptions opts = call_options(o, {parallel, parallel}, name,
                                    CostEstimate{.flops = 3 * elems, .transcendentals = elems,
                                                 .bytes_accessed = 2 * elems * dtype_size(r.dtype)});
    auto p = [r](Ref xr, Ref lse) { return exp(xr().astype(DType::f32) - lse().reshape({r.br, 1})); };
    if (grad)
      return pallas_call([r, p](Ref xr, Ref lse, Ref lab, Ref dl, Ref out) {
        Value onehot = is_label(r, program_id(1), lab).astype(DType::f32);
        out() = ((p(xr, lse) - onehot) * dl().reshape({r.br, 1})).astype(out.dtype());
      }, spec, std::vector<ShapeDtype>{ShapeDtype({r.rows, r.width}, r.dtype)}, opts, loc);
    return pallas_call([p](Ref xr, Ref lse, Ref out) { out() = p(xr, lse).astype(out.dtype()); }, spec,
                       std::vector<ShapeDtype>{ShapeDtype({r.rows, r.width}, r.dtype)}, opts, loc);
  });
  std::vector<Array> args{x, lse};
  if (grad) args.insert(args.end(), {*labels, *dloss});
  return call(args, loc).at(0);
}

}  // namespace tessera::norms::detail
