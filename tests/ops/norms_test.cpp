// RMSNorm, LayerNorm, softmax and cross-entropy (forward and backward) against plain references in
// double, in both backends, on odd shapes (partial row blocks, partial column blocks), and their
// errors. Compiled calls run in differential mode (every kernel again in the interpreter, outputs
// compared, docs/design.md §4.14); interpreted calls poison uninitialised memory, so a read of padding
// that a kernel failed to mask shows as NaN.
#include <doctest/doctest.h>

#include <tessera/norms.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/ops/reference_check.h"
#include "tests/support/user_error.h"
#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
namespace pl = tessera;
namespace nm = tessera::norms;
using doctest::Contains;

namespace {

using Vec = std::vector<double>;

// Rows and width of x [..., width].
struct Dims {
  int64_t rows, width;
};
Dims dims_of(const pl::Array& x) { return {x.size() / x.shape().back(), x.shape().back()}; }

// The norms' reference: y and the statistics; with dy the gradients of sum(y * dy). centered:
// LayerNorm, else RMSNorm (beta ignored).
struct NormRef {
  Vec y, mean, rstd, dx, dgamma, dbeta;
};
NormRef norm_reference(bool centered, const pl::Array& x_arr, const pl::Array& g_arr, const pl::Array* b_arr, double eps,
                       const pl::Array* dy_arr = nullptr) {
  const auto [rows, w] = dims_of(x_arr);
  const Vec x = x_arr.to_vector<double>(), g = g_arr.to_vector<double>();
  const Vec b = b_arr ? b_arr->to_vector<double>() : Vec(static_cast<size_t>(w), 0.0);
  const Vec dy = dy_arr ? dy_arr->to_vector<double>() : Vec{};
  NormRef r;
  r.y.assign(x.size(), 0);
  r.dx.assign(x.size(), 0);
  r.dgamma.assign(static_cast<size_t>(w), 0);
  r.dbeta.assign(static_cast<size_t>(w), 0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = &x[i * w];
    double mu = 0, var = 0;
    if (centered) {
      for (int64_t c = 0; c < w; ++c) mu += xr[c];
      mu /= w;
    }
    for (int64_t c = 0; c < w; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    const double rs = 1 / std::sqrt(var / w + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (int64_t c = 0; c < w; ++c) r.y[i * w + c] = (xr[c] - mu) * rs * g[c] + (centered ? b[c] : 0);
    if (!dy_arr) continue;
    // dx = rstd * (gd - mean(gd) - xhat * mean(gd * xhat)), gd = dy * gamma (RMSNorm: no mean(gd)).
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < w; ++c) {
      const double xhat = (xr[c] - mu) * rs, gd = dy[i * w + c] * g[c];
      mg += gd / w;
      mgx += gd * xhat / w;
      r.dgamma[c] += dy[i * w + c] * xhat;
      r.dbeta[c] += dy[i * w + c];
    }
    for (int64_t c = 0; c < w; ++c) {
      const double xhat = (xr[c] - mu) * rs, gd = dy[i * w + c] * g[c];
      r.dx[i * w + c] = rs * (gd - (centered ? mg : 0) - xhat * mgx);
    }
  }
  return r;
}

// Softmax and cross-entropy's reference: probabilities, lse, and with labels the loss; with dy the
// softmax gradient, with dloss cross-entropy's.
struct SoftmaxRef {
  Vec y, lse, loss, dx;
};
SoftmaxRef softmax_reference(const pl::Array& x_arr, const pl::Array* labels = nullptr, const pl::Array* dy_arr = nullptr,
                             const pl::Array* dloss_arr = nullptr) {
  const auto [rows, w] = dims_of(x_arr);
  const Vec x = x_arr.to_vector<double>();
  const std::vector<int32_t> lab = labels ? labels->to_vector<int32_t>() : std::vector<int32_t>{};
  const Vec dy = dy_arr ? dy_arr->to_vector<double>() : Vec{}, dl = dloss_arr ? dloss_arr->to_vector<double>() : Vec{};
  SoftmaxRef r;
  r.y.assign(x.size(), 0);
  r.dx.assign(x.size(), 0);
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0, dot = 0;
    for (int64_t c = 0; c < w; ++c) mx = std::max(mx, x[i * w + c]);
    for (int64_t c = 0; c < w; ++c) sum += std::exp(x[i * w + c] - mx);
    const double lse = mx + std::log(sum);
    r.lse.push_back(lse);
    if (labels) r.loss.push_back(lse - x[i * w + lab[i]]);
    for (int64_t c = 0; c < w; ++c) r.y[i * w + c] = std::exp(x[i * w + c] - lse);
    if (dy_arr)
      for (int64_t c = 0; c < w; ++c) dot += dy[i * w + c] * r.y[i * w + c];
    for (int64_t c = 0; c < w; ++c) {
      if (dy_arr) r.dx[i * w + c] = r.y[i * w + c] * (dy[i * w + c] - dot);
      if (dloss_arr) r.dx[i * w + c] = (r.y[i * w + c] - (c == lab[i] ? 1 : 0)) * dl[i];
    }
  }
  return r;
}

// Tolerances on |got - want| / (1 + |want|) against the double reference on the same (rounded)
// inputs. f32: the block reductions sum in another order; the worst seen is 1.4e-5 (LayerNorm's dx
// on rows of 3, where x - mean cancels), most under 1e-6. bf16: the outputs are bf16 (2^-9
// relative) and the statistics f32; the worst seen is 3.2e-3.
double tol(pl::DType dt) { return dt == pl::bf16 ? 1e-2 : 5e-5; }

using testing::close_to_reference;

// Runs body(options) compiled (checked against the interpreter) and interpreted.
void for_each_backend(nm::Options base, const std::function<void(const nm::Options&)>& body) {
  for (auto& b : testing::backends()) {
    INFO("backend " << std::string(b.name));
    nm::Options o = base;
    o.interpret = b.options.interpret;
    o.check_against_interpreter = !b.options.interpret.has_value();
    body(o);
  }
}

// Labels for `rows` rows of a `vocab` vocabulary, spread over it (first, last and middle columns).
pl::Array labels_for(const pl::Shape& lead, int64_t vocab) {
  int64_t rows = 1;
  for (int64_t d : lead) rows *= d;
  std::vector<int32_t> l;
  for (int64_t i = 0; i < rows; ++i) l.push_back(static_cast<int32_t>(i == 0 ? vocab - 1 : (i * 7919) % vocab));
  return pl::Array::from_vector(l, lead);
}

// The norms on x of `shape` with `o`'s blocks, forward and backward, f32 and bf16 (gamma, beta in x's dtype).
void check_norms(const pl::Shape& shape, nm::Options base) {
  const pl::Shape lead(shape.begin(), shape.end() - 1), pshape{shape.back()};
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    // An offset mean so the centring matters (LayerNorm's variance about the mean, not about 0); small
    // next to the spread, since f32 x - mean loses |mean| / spread of the precision a short row keeps.
    const pl::Array x = pl::Array::from_vector(pl::Array::random_normal(shape, pl::f32, 1).to_vector<double>(), shape, dt);
    const pl::Array xo = pl::Array::from_vector(
        [&] { Vec v = x.to_vector<double>(); for (double& e : v) e = e * 2 + 1; return v; }(), shape, dt);
    const pl::Array g = pl::Array::random_normal(pshape, dt, 2), b = pl::Array::random_normal(pshape, dt, 3),
                    dy = pl::Array::random_normal(shape, dt, 4);
    const NormRef rms = norm_reference(false, x, g, nullptr, base.eps, &dy);
    const NormRef ln = norm_reference(true, xo, g, &b, base.eps, &dy);
    for_each_backend(base, [&](const nm::Options& o) {
      INFO(pl::dtype_name(dt));
      const nm::RmsNormForward f = nm::rms_norm_fwd(x, g, o);
      CHECK(f.y.dtype() == dt);
      CHECK(f.y.shape() == shape);
      CHECK(f.rstd.shape() == lead);
      close_to_reference(f.y, rms.y, tol(dt), "rms y");
      close_to_reference(f.rstd, rms.rstd, tol(pl::f32), "rms rstd");
      const nm::RmsNormGradients rg = nm::rms_norm_bwd(x, g, f.rstd, dy, o);
      CHECK(rg.dgamma.dtype() == dt);
      close_to_reference(rg.dx, rms.dx, tol(dt), "rms dx");
      // dgamma sums over all rows: relative to the size of the sum.
      close_to_reference(rg.dgamma, rms.dgamma, tol(dt) * std::sqrt(double(x.size() / shape.back())), "rms dgamma");
      const nm::LayerNormForward lf = nm::layer_norm_fwd(xo, g, b, o);
      CHECK(lf.mean.shape() == lead);
      close_to_reference(lf.y, ln.y, tol(dt), "ln y");
      close_to_reference(lf.mean, ln.mean, tol(pl::f32), "ln mean");
      close_to_reference(lf.rstd, ln.rstd, tol(pl::f32), "ln rstd");
      const nm::LayerNormGradients lg = nm::layer_norm_bwd(xo, g, lf.mean, lf.rstd, dy, o);
      close_to_reference(lg.dx, ln.dx, tol(dt), "ln dx");
      close_to_reference(lg.dgamma, ln.dgamma, tol(dt) * std::sqrt(double(x.size() / shape.back())), "ln dgamma");
      close_to_reference(lg.dbeta, ln.dbeta, tol(dt) * std::sqrt(double(x.size() / shape.back())), "ln dbeta");
    });
  }
}

// Softmax and cross-entropy on logits of `shape`, forward and backward, f32 and bf16.
void check_softmax(const pl::Shape& shape, nm::Options base) {
  const pl::Shape lead(shape.begin(), shape.end() - 1);
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    // Logits spread wide (sd 4) so max subtraction matters and probabilities are far from uniform.
    const pl::Array x = pl::Array::from_vector(
        [&] { Vec v = pl::Array::random_normal(shape, pl::f32, 5).to_vector<double>(); for (double& e : v) e *= 4; return v; }(),
        shape, dt);
    const pl::Array dy = pl::Array::random_normal(shape, dt, 6), labels = labels_for(lead, shape.back());
    const pl::Array dloss = pl::Array::random_normal(lead, pl::f32, 7);
    const SoftmaxRef sm = softmax_reference(x), ce = softmax_reference(x, &labels, nullptr, &dloss);
    const pl::Array y_ref = pl::Array::from_vector(sm.y, shape, dt);
    for_each_backend(base, [&](const nm::Options& o) {
      INFO(pl::dtype_name(dt));
      const pl::Array y = nm::softmax(x, o);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == shape);
      close_to_reference(y, sm.y, tol(dt), "softmax y");
      // The backward from y as given: the reference's on the same rounded y.
      const Vec yv = y_ref.to_vector<double>(), dyv = dy.to_vector<double>();
      Vec want(yv.size());
      const int64_t w = shape.back();
      for (size_t i = 0; i < yv.size(); i += static_cast<size_t>(w)) {
        double dot = 0;
        for (int64_t c = 0; c < w; ++c) dot += yv[i + c] * dyv[i + c];
        for (int64_t c = 0; c < w; ++c) want[i + c] = yv[i + c] * (dyv[i + c] - dot);
      }
      close_to_reference(nm::softmax_bwd(y_ref, dy, o), want, tol(dt), "softmax dx");
      const nm::CrossEntropy c = nm::cross_entropy(x, labels, o);
      CHECK(c.loss.dtype() == pl::f32);
      CHECK(c.loss.shape() == lead);
      close_to_reference(c.loss, ce.loss, tol(pl::f32), "ce loss");
      close_to_reference(c.lse, ce.lse, tol(pl::f32), "ce lse");
      const pl::Array dl = nm::cross_entropy_bwd(x, labels, c.lse, dloss, o);
      CHECK(dl.dtype() == dt);
      close_to_reference(dl, ce.dx, tol(dt), "ce dlogits");
    });
  }
}

// Central differences of f at x (double) against grad, every `stride`-th element.
int check_finite_differences(const pl::Array& x, const Vec& grad, const std::function<double(const pl::Array&)>& f,
                             size_t stride) {
  const double eps = 1e-6;
  int checked = 0;
  for (size_t i = 0; i < grad.size(); i += stride) {
    Vec v = x.to_vector<double>();
    v[i] += eps;
    const double up = f(pl::Array::from_vector(v, x.shape(), pl::f64));
    v[i] -= 2 * eps;
    const double down = f(pl::Array::from_vector(v, x.shape(), pl::f64));
    INFO("element " << i);
    CHECK(grad[i] == doctest::Approx((up - down) / (2 * eps)).epsilon(1e-6).scale(1));
    ++checked;
  }
  return checked;
}

double weighted(const Vec& v, const Vec& w) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("norms: the references' gradients match finite differences") {
    const pl::Shape shape{3, 5};
    const pl::Array x = pl::Array::random_normal(shape, pl::f64, 11), g = pl::Array::random_normal({5}, pl::f64, 12),
                    b = pl::Array::random_normal({5}, pl::f64, 13), dy = pl::Array::random_normal(shape, pl::f64, 14);
    const Vec w = dy.to_vector<double>();
    for (bool centered : {false, true}) {
      INFO("centered " << centered);
      const NormRef r = norm_reference(centered, x, g, &b, 1e-3, &dy);
      auto loss_x = [&](const pl::Array& xx) { return weighted(norm_reference(centered, xx, g, &b, 1e-3).y, w); };
      auto loss_g = [&](const pl::Array& gg) { return weighted(norm_reference(centered, x, gg, &b, 1e-3).y, w); };
      auto loss_b = [&](const pl::Array& bb) { return weighted(norm_reference(centered, x, g, &bb, 1e-3).y, w); };
      CHECK(check_finite_differences(x, r.dx, loss_x, 1) == 15);
      CHECK(check_finite_differences(g, r.dgamma, loss_g, 1) == 5);
      if (centered) CHECK(check_finite_differences(b, r.dbeta, loss_b, 1) == 5);
    }
    const pl::Array labels = pl::Array::from_vector(std::vector<int32_t>{4, 0, 2}, {3});
    const pl::Array dloss = pl::Array::random_normal({3}, pl::f64, 15);
    const SoftmaxRef s = softmax_reference(x, nullptr, &dy), ce = softmax_reference(x, &labels, nullptr, &dloss);
    CHECK(check_finite_differences(x, s.dx, [&](const pl::Array& xx) { return weighted(softmax_reference(xx).y, w); }, 1) == 15);
    CHECK(check_finite_differences(
              x, ce.dx, [&](const pl::Array& xx) { return weighted(softmax_reference(xx, &labels).loss, dloss.to_vector<double>()); },
              1) == 15);
  }

  TEST_CASE("norms: RMSNorm and LayerNorm match the reference (partial row blocks, odd widths, 3-D x)") {
    // 111 rows in blocks of 16 (the last holds 15), width 45.
    check_norms({3, 37, 45}, {.eps = 1e-5, .block_rows = 16});
    // The default blocks; one row.
    check_norms({1, 300}, {});
  }

  TEST_CASE("norms: dgamma's final reduction over several row chunks and column blocks") {
    // 300 row blocks of 2 rows: the partial sums take two row chunks of the final kernel (256 and
    // 44); width 700: two column blocks of it (512 and 188).
    check_norms({599, 3}, {.block_rows = 2});
    check_norms({20, 700}, {.block_rows = 8});
  }

  TEST_CASE("softmax and cross-entropy match the reference (one block per row, and rows over column blocks)") {
    check_softmax({7, 50}, {});                         // the whole row in one block
    check_softmax({2, 13, 1000}, {.block_rows = 8, .block_cols = 128});  // 8 column blocks, the last partial (104)
    check_softmax({5, 512}, {.block_cols = 128});      // column blocks that divide the row
  }

  TEST_CASE("softmax and cross-entropy over column blocks take -inf logits as masked, in whole blocks too") {
    // Row 0's first two column blocks (of 16) are all -inf, row 1 is -inf past column 40, row 2 has
    // scattered -inf entries: the online max-sum must start from a block whose max is -inf.
    const int64_t rows = 3, vocab = 70;
    std::vector<float> v = pl::Array::random_normal({rows, vocab}, pl::f32, 31).to_vector<float>();
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < vocab; ++c) {
      if (c < 32) v[c] = -inf;
      if (c > 40) v[vocab + c] = -inf;
      if (c % 3 == 0) v[2 * vocab + c] = -inf;
    }
    const pl::Array x = pl::Array::from_vector(v, {rows, vocab});
    const pl::Array labels = pl::Array::from_vector(std::vector<int32_t>{50, 3, 4}, {rows});
    const SoftmaxRef want = softmax_reference(x, &labels);
    for_each_backend({.block_cols = 16}, [&](const nm::Options& o) {
      close_to_reference(nm::softmax(x, o), want.y, tol(pl::f32), "softmax");
      const nm::CrossEntropy c = nm::cross_entropy(x, labels, o);
      close_to_reference(c.loss, want.loss, tol(pl::f32), "loss");
      close_to_reference(c.lse, want.lse, tol(pl::f32), "lse");
    });
  }

  TEST_CASE("norms: bf16 x with f32 gamma and beta, f32 gradients of them") {
    const pl::Shape shape{9, 33};
    const pl::Array x = pl::Array::random_normal(shape, pl::bf16, 41), dy = pl::Array::random_normal(shape, pl::bf16, 42);
    const pl::Array g = pl::Array::random_normal({33}, pl::f32, 43), b = pl::Array::random_normal({33}, pl::f32, 44);
    const NormRef want = norm_reference(true, x, g, &b, 1e-6, &dy);
    for_each_backend({.block_rows = 4}, [&](const nm::Options& o) {
      const nm::LayerNormForward f = nm::layer_norm_fwd(x, g, b, o);
      CHECK(f.y.dtype() == pl::bf16);
      close_to_reference(f.y, want.y, tol(pl::bf16), "y");
      const nm::LayerNormGradients lg = nm::layer_norm_bwd(x, g, f.mean, f.rstd, dy, o);
      CHECK(lg.dx.dtype() == pl::bf16);
      CHECK(lg.dgamma.dtype() == pl::f32);
      CHECK(lg.dbeta.dtype() == pl::f32);
      close_to_reference(lg.dx, want.dx, tol(pl::bf16), "dx");
      close_to_reference(lg.dgamma, want.dgamma, tol(pl::f32) * 3, "dgamma");
      close_to_reference(lg.dbeta, want.dbeta, tol(pl::f32) * 3, "dbeta");
    });
  }

  TEST_CASE("norms: no rows give empty results and zero parameter gradients, and a 1-D x is one row") {
    const pl::Array g = pl::Array::random_normal({5}, pl::f32, 51), b = pl::Array::random_normal({5}, pl::f32, 52);
    for_each_backend({}, [&](const nm::Options& o) {
      const pl::Array none = pl::Array::zeros({0, 5}, pl::f32);
      const nm::LayerNormForward f = nm::layer_norm_fwd(none, g, b, o);
      CHECK(f.y.shape() == pl::Shape{0, 5});
      CHECK(f.rstd.shape() == pl::Shape{0});
      const nm::LayerNormGradients lg = nm::layer_norm_bwd(none, g, f.mean, f.rstd, none, o);
      CHECK(lg.dx.shape() == pl::Shape{0, 5});
      CHECK(lg.dgamma.to_vector<float>() == std::vector<float>(5, 0.0f));
      CHECK(lg.dbeta.to_vector<float>() == std::vector<float>(5, 0.0f));
      CHECK(nm::softmax(none, o).shape() == pl::Shape{0, 5});
      CHECK(nm::cross_entropy(none, pl::Array::zeros({0}, pl::i32), o).loss.shape() == pl::Shape{0});
      // A 1-D x: one row, scalar statistics.
      const pl::Array x = pl::Array::random_normal({5}, pl::f32, 53), dy = pl::Array::random_normal({5}, pl::f32, 54);
      const NormRef want = norm_reference(false, x, g, nullptr, o.eps, &dy);
      const nm::RmsNormForward rf = nm::rms_norm_fwd(x, g, o);
      CHECK(rf.rstd.shape() == pl::Shape{});
      close_to_reference(rf.y, want.y, tol(pl::f32), "y");
      close_to_reference(nm::rms_norm_bwd(x, g, rf.rstd, dy, o).dgamma, want.dgamma, tol(pl::f32), "dgamma");
    });
  }

  TEST_CASE("norms: dgamma and dbeta do not depend on the order of the parallel row blocks") {
    // Each row block writes its own partial sums, so the interpreter's shuffled orders of the
    // parallel grid dim give the same bits as the row-major order.
    const pl::Array x = pl::Array::random_normal({45, 24}, pl::f32, 61), dy = pl::Array::random_normal({45, 24}, pl::f32, 62);
    const pl::Array g = pl::Array::random_normal({24}, pl::f32, 63), b = pl::Array::random_normal({24}, pl::f32, 64);
    const nm::Options in_order{.block_rows = 4, .interpret = pl::InterpretParams{}};
    const nm::LayerNormForward f = nm::layer_norm_fwd(x, g, b, in_order);
    const nm::LayerNormGradients want = nm::layer_norm_bwd(x, g, f.mean, f.rstd, dy, in_order);
    for (uint64_t seed : {1, 2, 3}) {
      nm::Options shuffled = in_order;
      shuffled.interpret = pl::InterpretParams{.random_seed = seed, .random_parallel_order = true};
      const nm::LayerNormGradients got = nm::layer_norm_bwd(x, g, f.mean, f.rstd, dy, shuffled);
      CHECK(pl::max_abs_diff(got.dx, want.dx) == 0);
      CHECK(pl::max_abs_diff(got.dgamma, want.dgamma) == 0);
      CHECK(pl::max_abs_diff(got.dbeta, want.dbeta) == 0);
    }
  }

  TEST_CASE("cross-entropy over a 32k vocabulary in column blocks") {
    const int64_t vocab = 32000;
    const pl::Array x = pl::Array::random_normal({3, vocab}, pl::f32, 21), labels = labels_for({3}, vocab);
    const SoftmaxRef ce = softmax_reference(x, &labels);
    const nm::CrossEntropy c = nm::cross_entropy(x, labels, {.check_against_interpreter = true});
    close_to_reference(c.loss, ce.loss, tol(pl::f32), "loss");
    close_to_reference(nm::softmax(x, {.block_cols = 4096}), ce.y, tol(pl::f32), "softmax");
  }

  TEST_CASE("norms: misuse is a UserError naming what was given and how to fix it") {
    const pl::Array x = pl::Array::zeros({4, 6}, pl::f32), g = pl::Array::full({6}, 1.0, pl::f32);
    testing::check_user_error([&] { nm::rms_norm(x, pl::Array::full({5}, 1.0, pl::f32)); },
                     "rms_norm: 'gamma' must be f32 or bf16 of shape (6), the normalised axis",
                     "'gamma' of dtype f32, shape (5)",
                     "pass a 'gamma' with one element per column of x (6)", "norms_test.cpp");
    CHECK_THROWS_WITH_AS(nm::layer_norm(x, g, pl::Array::full({6}, 1.0, pl::i32)),
                         Contains("layer_norm: 'beta' must be f32 or bf16 of shape (6)"), UserError);
    CHECK_THROWS_WITH_AS(nm::rms_norm(x.astype(pl::f16), g), Contains("rms_norm: 'x' must be f32 or bf16"), UserError);
    CHECK_THROWS_WITH_AS(nm::softmax(pl::Array::zeros({4, 0}, pl::f32)),
                         Contains("softmax: 'x' must have a non-empty last axis (the one normalised)"), UserError);
    CHECK_THROWS_WITH_AS(nm::rms_norm(x, g, {.eps = 0}), Contains("rms_norm: eps must be positive and finite"), UserError);
    CHECK_THROWS_WITH_AS(nm::rms_norm(x, g, {.block_rows = -1}), Contains("rms_norm: block_rows must be positive (or 0"),
                         UserError);
    CHECK_THROWS_WITH_AS(nm::softmax(x, {.block_cols = 0}), Contains("softmax: block_cols must be positive"), UserError);
    const nm::RmsNormForward f = nm::rms_norm_fwd(x, g);
    CHECK_THROWS_WITH_AS(nm::rms_norm_bwd(x, g, f.rstd, pl::Array::zeros({4, 5}, pl::f32)),
                         Contains("rms_norm_bwd: 'dy' must have the shape and dtype of 'x'"), UserError);
    CHECK_THROWS_WITH_AS(nm::rms_norm_bwd(x, g, pl::Array::zeros({3}, pl::f32), x),
                         Contains("rms_norm_bwd: 'rstd' must be f32 of shape (4) (one per row)"), UserError);
    CHECK_THROWS_WITH_AS(nm::layer_norm_bwd(x, g, f.rstd.astype(pl::bf16), f.rstd, x),
                         Contains("layer_norm_bwd: 'mean' must be f32 of shape (4)"), UserError);
    CHECK_THROWS_WITH_AS(nm::softmax_bwd(x, x.astype(pl::bf16)), Contains("softmax_bwd: 'dy' must have the shape and dtype of 'y'"),
                         UserError);
    const pl::Array labels = pl::Array::zeros({4}, pl::i32);
    try {
      nm::cross_entropy(x, labels.astype(pl::f32));
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "cross_entropy: 'labels' must be i32 of the logits' leading dims (4)");
      CHECK(e.given() == "'labels' of dtype f32, shape (4)");
      CHECK(e.fix() == "pass one i32 class index per row, e.g. labels.astype(pl::i32)");
    }
    CHECK_THROWS_WITH_AS(nm::cross_entropy(x, pl::Array::zeros({4, 1}, pl::i32)),
                         Contains("cross_entropy: 'labels' must be i32 of the logits' leading dims (4)"), UserError);
    try {
      nm::cross_entropy(x, pl::Array::from_vector(std::vector<int32_t>{0, 1, 6, 2}, {4}));
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "cross_entropy: label out of range [0, 6)");
      CHECK(e.given() == "labels[2] = 6 (row 2 of 4)");
    }
    const nm::CrossEntropy c = nm::cross_entropy(x, labels);
    CHECK_THROWS_WITH_AS(nm::cross_entropy_bwd(x, labels, c.lse, pl::Array::zeros({4}, pl::bf16)),
                         Contains("cross_entropy_bwd: 'dloss' must be f32 of shape (4) (one per row)"), UserError);
  }

  TEST_CASE("norms: an invalid TESSERA_INTERPRET fails the op at the user's line, and the next call works") {
    // The op's kept call reads the variable (dsl/kept_call.h): the error is the op's, at its line.
    const pl::Array x = pl::Array::random_normal({4, 8}, pl::f32, 21), g = pl::Array::random_normal({8}, pl::f32, 22);
    {
      const testing::ScopedEnv interpret("TESSERA_INTERPRET", "maybe");
      testing::check_user_error_at(__LINE__, "norms_test.cpp", [&] { (void)nm::rms_norm(x, g); }, "TESSERA_INTERPRET=maybe");
      testing::check_user_error_at(__LINE__, "norms_test.cpp", [&] { (void)nm::softmax(x); }, "TESSERA_INTERPRET=maybe");
    }
    close_to_reference(nm::rms_norm(x, g), norm_reference(false, x, g, nullptr, 1e-6).y, 1e-5);
  }
}
