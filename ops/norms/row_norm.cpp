// RMSNorm and LayerNorm, forward and backward: one kernel body for both, since RMSNorm is LayerNorm
// without the centring (no mean, no beta). A block holds br whole rows; the row's statistics are
// reductions over the block's last axis, in f32 whatever x's dtype.
#include <fmt/format.h>

#include <optional>

#include "dsl/control.h"
#include "ops/norms/rows.h"

namespace tessera::norms {

namespace {

using detail::Rows;

// What a specialisation is traced for: the rows and whether the norm centres (LayerNorm).
struct Norm {
  Rows r;
  bool centered = false;
  float eps = 0;
  const char* name() const { return centered ? "layer_norm" : "rms_norm"; }
};

// gamma (or beta) as an f32 row that broadcasts over the block's rows.
Value as_row(const Norm& n, const Ref& p) { return p().astype(DType::f32).reshape({1, n.r.width}); }

// y = (x - mean) * rstd * gamma + beta; rstd = rsqrt(mean((x - mean)^2) + eps). RMSNorm: mean = 0,
// no beta. The variance is taken about the mean (two passes over the block, not E[x^2] - E[x]^2,
// which cancels catastrophically when |mean| >> std).
void forward_body(const Norm& n, Ref x, Ref gamma, std::optional<Ref> beta, Ref y, std::optional<Ref> mean, Ref rstd) {
  const float inv_width = 1.0f / static_cast<float>(n.r.width);
  Value xc = x().astype(DType::f32);
  if (mean) {
    Value mu = xc.sum(1, /*keepdims=*/true) * inv_width;
    xc = xc - mu;
    (*mean)() = mu.reshape({n.r.br});
  }
  Value rs = rsqrt((xc * xc).sum(1, /*keepdims=*/true) * inv_width + n.eps);
  Value out = xc * rs * as_row(n, gamma);
  if (beta) out = out + as_row(n, *beta);
  y() = out.astype(y.dtype());
  rstd() = rs.reshape({n.r.br});
}

// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (RMSNorm: without the mean(g) term)
//   dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
// The sums over rows are this row block's partials (one row of `*_part` per block); rows of a
// partial edge block past the end are masked out of them.
void backward_body(const Norm& n, Ref x, Ref gamma, std::optional<Ref> mean, Ref rstd, Ref dy, Ref dx, Ref dgamma_part,
                   std::optional<Ref> dbeta_part) {
  const Rows& r = n.r;
  const float inv_width = 1.0f / static_cast<float>(r.width);
  Value xc = x().astype(DType::f32);
  if (mean) xc = xc - (*mean)().reshape({r.br, 1});
  Value rs = rstd().reshape({r.br, 1});
  Value xhat = xc * rs;
  Value dyf = dy().astype(DType::f32);
  Value g = dyf * as_row(n, gamma);
  Value d = g - xhat * ((g * xhat).sum(1, /*keepdims=*/true) * inv_width);
  if (mean) d = d - g.sum(1, /*keepdims=*/true) * inv_width;
  dx() = (d * rs).astype(dx.dtype());
  const Value i = program_id(0);
  auto over_rows = [&](const Value& v) {
    return (r.rows % r.br == 0 ? v : where(detail::rows_in_bounds(r, i, r.width), v, 0.0f)).sum(0);
  };
  dgamma_part() = over_rows(dyf * xhat);
  if (dbeta_part) (*dbeta_part)() = over_rows(dyf);
}

CostEstimate cost(const Norm& n, int64_t passes) {
  const int64_t elems = n.r.rows * n.r.width;
  return CostEstimate{.flops = 8 * passes * elems, .transcendentals = n.r.rows,
                      .bytes_accessed = passes * elems * dtype_size(n.r.dtype)};
}

Norm plan(const char* api, const Array& x, const Array& gamma, const Array* beta, bool centered, const Options& o,
          std::source_location loc) {
  Norm n{.r = detail::plan_rows(api, x, "x", o, /*block_row=*/false, loc), .centered = centered,
         .eps = detail::checked_eps(api, o.eps, loc)};
  detail::check_parameter(api, n.r, gamma, "gamma", loc);
  if (beta) detail::check_parameter(api, n.r, *beta, "beta", loc);
  return n;
}

// The forward's outputs: y, then (LayerNorm) mean, then rstd.
std::vector<Array> forward(const Norm& n, const Array& x, const Array& gamma, const Array* beta, const Options& o,
                           std::source_location loc) {
  const Rows& r = n.r;
  std::vector<BlockSpec> in_specs{detail::row_spec(r), detail::parameter_spec(r)};
  std::vector<BlockSpec> out_specs{detail::row_spec(r), detail::row_stat_spec(r)};
  std::vector<ShapeDtype> outs{ShapeDtype({r.rows, r.width}, r.dtype), ShapeDtype({r.rows}, DType::f32)};
  if (n.centered) {
    in_specs.push_back(detail::parameter_spec(r));
    out_specs.push_back(detail::row_stat_spec(r));
    outs.push_back(ShapeDtype({r.rows}, DType::f32));
  }
  const std::string key = r.key(n.centered ? "layer_norm_fwd" : "rms_norm_fwd", n.eps) +
                          fmt::format(" gamma={}", dtype_name(gamma.dtype())) +
                          (beta ? fmt::format(" beta={}", dtype_name(beta->dtype())) : "");
  PallasCall<std::vector<Array>> call = detail::cached_call(key, o, loc, [&] {
    GridSpec spec{.grid = {r.row_blocks()}, .in_specs = in_specs, .out_specs = out_specs};
    CallOptions opts = detail::call_options(o, {parallel}, fmt::format("{}_fwd", n.name()), cost(n, 2));
    if (n.centered)
      return pallas_call([n](Ref xr, Ref g, Ref b, Ref y, Ref rs, Ref mu) { forward_body(n, xr, g, b, y, mu, rs); }, spec,
                         outs, opts, loc);
    return pallas_call([n](Ref xr, Ref g, Ref y, Ref rs) { forward_body(n, xr, g, std::nullopt, y, std::nullopt, rs); },
                       spec, outs, opts, loc);
  });
  std::vector<Array> args{detail::as_matrix(r, x), gamma};
  if (beta) args.push_back(*beta);
  std::vector<Array> res = call(args, loc);
  res[0] = res[0].reshape(x.shape());
  for (size_t k = 1; k < res.size(); ++k) res[k] = res[k].reshape(r.lead);
  return res;
}

// The backward's outputs: dx, dgamma, then (LayerNorm) dbeta.
std::vector<Array> backward(const char* api, const Norm& n, const Array& x, const Array& gamma, const Array* mean,
                            const Array& rstd, const Array& dy, const Options& o, std::source_location loc) {
  const Rows& r = n.r;
  detail::check_like(api, x, "x", dy, "dy", loc);
  if (r.rows == 0) {
    // No rows: an empty dx and zero sums. (Traced, the partials' squeezed block over a dim of no row
    // blocks is an internal error of expand_pipelines, "the block fits in the array", where §4.16
    // makes a block over an empty dim all padding.)
    detail::as_row_vector(api, r, rstd, "rstd", DType::f32, loc);
    if (mean) detail::as_row_vector(api, r, *mean, "mean", DType::f32, loc);
    std::vector<Array> grads{Array::zeros(x.shape(), x.dtype()), Array::zeros({r.width}, gamma.dtype())};
    if (n.centered) grads.push_back(Array::zeros({r.width}, gamma.dtype()));
    return grads;
  }
  std::vector<Array> args{detail::as_matrix(r, x), gamma};
  std::vector<BlockSpec> in_specs{detail::row_spec(r), detail::parameter_spec(r)};
  if (mean) {
    args.push_back(detail::as_row_vector(api, r, *mean, "mean", DType::f32, loc));
    in_specs.push_back(detail::row_stat_spec(r));
  }
  args.push_back(detail::as_row_vector(api, r, rstd, "rstd", DType::f32, loc));
  args.push_back(detail::as_matrix(r, dy));
  in_specs.insert(in_specs.end(), {detail::row_stat_spec(r), detail::row_spec(r)});
  std::vector<BlockSpec> out_specs{detail::row_spec(r), detail::partial_spec(r)};
  std::vector<ShapeDtype> outs{ShapeDtype({r.rows, r.width}, r.dtype), ShapeDtype({r.row_blocks(), r.width}, DType::f32)};
  if (n.centered) {
    out_specs.push_back(detail::partial_spec(r));
    outs.push_back(ShapeDtype({r.row_blocks(), r.width}, DType::f32));
  }
  const std::string key = r.key(n.centered ? "layer_norm_bwd" : "rms_norm_bwd") + fmt::format(" gamma={}", dtype_name(gamma.dtype()));
  PallasCall<std::vector<Array>> call = detail::cached_call(key, o, loc, [&] {
    GridSpec spec{.grid = {r.row_blocks()}, .in_specs = in_specs, .out_specs = out_specs};
    CallOptions opts = detail::call_options(o, {parallel}, fmt::format("{}_bwd", n.name()), cost(n, 3));
    if (n.centered)
      return pallas_call([n](Ref xr, Ref g, Ref mu, Ref rs, Ref dyr, Ref dxr, Ref dg, Ref db) {
        backward_body(n, xr, g, mu, rs, dyr, dxr, dg, db);
      }, spec, outs, opts, loc);
    return pallas_call([n](Ref xr, Ref g, Ref rs, Ref dyr, Ref dxr, Ref dg) {
      backward_body(n, xr, g, std::nullopt, rs, dyr, dxr, dg, std::nullopt);
    }, spec, outs, opts, loc);
  });
  std::vector<Array> res = call(args, loc);
  std::vector<Array> grads{res[0].reshape(x.shape()),
                           detail::sum_partials(res[1], gamma.dtype(), o, fmt::format("{}_dgamma", n.name()), loc)};
  if (n.centered) grads.push_back(detail::sum_partials(res[2], gamma.dtype(), o, "layer_norm_dbeta", loc));
  return grads;
}

}  // namespace

RmsNormForward rms_norm_fwd(const Array& x, const Array& gamma, const Options& o, Loc loc) {
  const Norm n = plan("rms_norm", x, gamma, nullptr, false, o, loc);
  std::vector<Array> r = forward(n, x, gamma, nullptr, o, loc);
  return {r[0], r[1]};
}

Array rms_norm(const Array& x, const Array& gamma, const Options& o, Loc loc) { return rms_norm_fwd(x, gamma, o, loc).y; }

RmsNormGradients rms_norm_bwd(const Array& x, const Array& gamma, const Array& rstd, const Array& dy, const Options& o,
                              Loc loc) {
  const Norm n = plan("rms_norm_bwd", x, gamma, nullptr, false, o, loc);
  std::vector<Array> g = backward("rms_norm_bwd", n, x, gamma, nullptr, rstd, dy, o, loc);
  return {g[0], g[1]};
}

LayerNormForward layer_norm_fwd(const Array& x, const Array& gamma, const Array& beta, const Options& o, Loc loc) {
  const Norm n = plan("layer_norm", x, gamma, &beta, true, o, loc);
  std::vector<Array> r = forward(n, x, gamma, &beta, o, loc);
  return {r[0], r[2], r[1]};
}

Array layer_norm(const Array& x, const Array& gamma, const Array& beta, const Options& o, Loc loc) {
  return layer_norm_fwd(x, gamma, beta, o, loc).y;
}

LayerNormGradients layer_norm_bwd(const Array& x, const Array& gamma, const Array& mean, const Array& rstd,
                                  const Array& dy, const Options& o, Loc loc) {
  const Norm n = plan("layer_norm_bwd", x, gamma, nullptr, true, o, loc);
  std::vector<Array> g = backward("layer_norm_bwd", n, x, gamma, &mean, rstd, dy, o, loc);
  return {g[0], g[1], g[2]};
}

}  // namespace tessera::norms
