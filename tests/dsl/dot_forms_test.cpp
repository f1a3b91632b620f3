// The dot_general forms besides A[m,k] . B[k,n]: a transposed lhs (contracting dims (0, 0), as
// megablox tgmm's x.T @ dy), a transposed rhs ((1, 1), x @ w.T), both, batched ones, and a dot of an
// explicit transpose. Each reaches the target's register-blocked micro-kernel on strided views of
// its operands (jit/llvm/gemm.h, docs/design.md §8): the disassembled code holds the tile's
// instructions, and on every target this CPU runs the results agree with the interpreter, f32 and
// bf16 within the dot tolerance, int8 exactly.
#include <doctest/doctest.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "jit/llvm/compiler.h"
#include "jit/llvm/disassembler.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// A dot_general form: operand shapes built from (batch, m, k, n) and its dimension numbers.
struct Form {
  const char* name;
  bool lhs_t, rhs_t, batched, explicit_transpose;
  pl::Shape lhs(int64_t b, int64_t m, int64_t k) const {
    pl::Shape s = lhs_t ? pl::Shape{k, m} : pl::Shape{m, k};
    if (batched) s.insert(s.begin(), b);
    return s;
  }
  pl::Shape rhs(int64_t b, int64_t k, int64_t n) const {
    pl::Shape s = rhs_t ? pl::Shape{n, k} : pl::Shape{k, n};
    if (batched) s.insert(s.begin(), b);
    return s;
  }
  pl::Shape out(int64_t b, int64_t m, int64_t n) const { return batched ? pl::Shape{b, m, n} : pl::Shape{m, n}; }
  pl::DotDimensionNumbers dims() const {
    const int64_t o = batched ? 1 : 0;
    if (explicit_transpose) return {{{1}, {0}}, {}};
    pl::DotDimensionNumbers d{{{(lhs_t ? 0 : 1) + o}, {(rhs_t ? 1 : 0) + o}}, {}};
    if (batched) d.batch = {{0}, {0}};
    return d;
  }
  // The dot of x and y in this form, in `out` (f32 or i32).
  pl::Value dot(pl::Value x, pl::Value y, pl::DType out) const {
    if (explicit_transpose) x = pl::swapaxes(x, 0, 1);  // x is (k, m): the dot reads it through the transpose
    return pl::dot_general(x, y, dims(), out);
  }
};

const Form kForms[] = {
    {"x.T @ y (contract 0, 0)", true, false, false, false},
    {"x @ y.T (contract 1, 1)", false, true, false, false},
    {"x.T @ y.T (contract 0, 1)", true, true, false, false},
    {"batched x @ y", false, false, true, false},
    {"batched x.T @ y.T", true, true, true, false},
    {"swapaxes(x) @ y", true, false, false, true},
};

// The kernel `o() = dot` or `o() = c(); o() += dot` in `form`, compiled for `target` or interpreted.
pl::Array run(const Form& form, bool accumulate, pl::DType out, const pl::Array& x, const pl::Array& y,
              const pl::Array& c, const pl::CallOptions& options) {
  auto kernel = [form, accumulate, out](pl::Ref xr, pl::Ref yr, pl::Ref cr, pl::Ref o) {
    if (!accumulate) {
      o() = form.dot(xr(), yr(), out);
      return;
    }
    o() = cr();
    o() += form.dot(xr(), yr(), out);
  };
  return pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(c.shape(), out), options)(x, y, c);
}

// Deterministic i8 values over the whole range, -128 included.
pl::Array int8s(const pl::Shape& shape, uint32_t seed) {
  std::vector<int8_t> v(static_cast<size_t>(pl::num_elements(shape)));
  uint32_t state = seed;
  for (auto& e : v) {
    state = state * 1664525u + 1013904223u;
    e = static_cast<int8_t>(state >> 24);
  }
  v.front() = -128;
  return pl::Array::from_vector(v, shape);
}

struct Shape4 {
  int64_t b, m, k, n;
};
// Full tiles and row tails (13 = 8 + 5 = 2 * 6 + 1), full panels and masked column tails (70 = 2 * 32
// + 6 = 4 * 16 + 6), an odd k with k % 4 != 0 that a transposed B's packing takes partly in blocks
// (37 = 2 * 16 + 5 f32 rows, 16 + 2 bf16 pairs and an odd row); two batches. (Each case compiles
// its kernels, so the tails of the plain form's many shapes are left to target_test.cpp.)
const Shape4 kShapes[] = {{2, 13, 37, 70}};

// Calls body(compiled) for every target this CPU runs, `compiled` selecting it.
template <class F>
void on_runnable_targets(F&& body) {
  for (std::string_view name : jit::target_names()) {
    if (!jit::missing_on_host(jit::cpu_target(name)).empty()) continue;
    INFO("target " << std::string(name));
    pl::CallOptions compiled;
    compiled.compiler_params.target = std::string(name);
    body(compiled);
  }
}

// Calls body(compiled, form, shape, accumulate) for every target this CPU runs (`compiled` selects
// it), every form and shape, storing the dot and accumulating it.
template <class F>
void sweep(F&& body) {
  on_runnable_targets([&](const pl::CallOptions& compiled) {
    for (const Form& form : kForms) {
      INFO("form " << form.name);
      for (const Shape4& s : kShapes) {
        INFO("b, m, k, n = " << s.b << ", " << s.m << ", " << s.k << ", " << s.n);
        for (bool acc : {false, true}) {
          INFO(std::string(acc ? "o() += dot" : "o() = dot"));
          body(compiled, form, s, acc);
        }
      }
    }
  });
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("dot forms: transposed and batched float dots agree with the interpreter on every runnable target") {
    const std::pair<pl::DType, pl::DType> dtypes[] = {{pl::f32, pl::f32}, {pl::bf16, pl::bf16}, {pl::bf16, pl::f32}};
    sweep([&](const pl::CallOptions& compiled, const Form& form, const Shape4& s, bool acc) {
      for (const auto& [lt, rt] : dtypes) {
        INFO("dtypes " << pl::dtype_name(lt) << " x " << pl::dtype_name(rt));
        const pl::Array x = pl::Array::random_normal(form.lhs(s.b, s.m, s.k), lt, 3),
                        y = pl::Array::random_normal(form.rhs(s.b, s.k, s.n), rt, 4),
                        c = pl::Array::random_normal(form.out(s.b, s.m, s.n), pl::f32, 5);
        const double tolerance = 1e-6 * static_cast<double>(s.k + 1);
        CHECK(pl::allclose(run(form, acc, pl::f32, x, y, c, compiled),
                           run(form, acc, pl::f32, x, y, c, testing::interpret()), tolerance, tolerance));
      }
    });
  }

  TEST_CASE("dot forms: transposed and batched int8 dots equal the interpreter's on every runnable target") {
    sweep([&](const pl::CallOptions& compiled, const Form& form, const Shape4& s, bool acc) {
      const pl::Array x = int8s(form.lhs(s.b, s.m, s.k), 3), y = int8s(form.rhs(s.b, s.k, s.n), 4),
                      c = int8s(form.out(s.b, s.m, s.n), 5).astype(pl::i32);
      CHECK(run(form, acc, pl::i32, x, y, c, compiled).to_vector<int32_t>() ==
            run(form, acc, pl::i32, x, y, c, testing::interpret()).to_vector<int32_t>());
    });
  }

  // `o() = acc() + dot` (megablox tgmm's group end): the micro-tiles start their sums from the
  // scratch where it is and write the output, the scratch left as it was; either operand order, each
  // form (the batched ones, rank 3, take the unfused path), f32, bf16 and int8.
  TEST_CASE("dot forms: an accumulator plus a dot stored to another ref agrees with the interpreter") {
    auto run_sum = [](const Form& form, bool dot_first, pl::DType out, const pl::Array& x, const pl::Array& y,
                      const pl::Array& c, const pl::CallOptions& options) {
      auto kernel = [form, dot_first, out](pl::Ref xr, pl::Ref yr, pl::Ref cr, pl::Ref o, pl::Ref kept, pl::Ref acc) {
        acc() = cr();
        o() = dot_first ? form.dot(xr(), yr(), out) + acc() : acc() + form.dot(xr(), yr(), out);
        kept() = acc();
      };
      const pl::GridSpec grid{.scratch_shapes = {pl::VMEM(c.shape(), out)}};
      return pl::pallas_call(kernel, grid, {pl::ShapeDtype(c.shape(), out), pl::ShapeDtype(c.shape(), out)},
                             options)(x, y, c);
    };
    const std::pair<pl::DType, pl::DType> dtypes[] = {{pl::f32, pl::f32}, {pl::bf16, pl::bf16}, {pl::i8, pl::i8}};
    sweep([&](const pl::CallOptions& compiled, const Form& form, const Shape4& s, bool dot_first) {
      INFO(std::string(dot_first ? "dot + acc" : "acc + dot"));
      for (const auto& [lt, rt] : dtypes) {
        INFO("dtypes " << pl::dtype_name(lt) << " x " << pl::dtype_name(rt));
        const bool ints = lt == pl::i8;
        const pl::DType out = ints ? pl::i32 : pl::f32;
        const pl::Array x = ints ? int8s(form.lhs(s.b, s.m, s.k), 3) : pl::Array::random_normal(form.lhs(s.b, s.m, s.k), lt, 3),
                        y = ints ? int8s(form.rhs(s.b, s.k, s.n), 4) : pl::Array::random_normal(form.rhs(s.b, s.k, s.n), rt, 4),
                        c = ints ? int8s(form.out(s.b, s.m, s.n), 5).astype(pl::i32)
                                 : pl::Array::random_normal(form.out(s.b, s.m, s.n), pl::f32, 5);
        const std::vector<pl::Array> got = run_sum(form, dot_first, out, x, y, c, compiled),
                                     want = run_sum(form, dot_first, out, x, y, c, testing::interpret());
        const double tolerance = ints ? 0 : 1e-6 * static_cast<double>(s.k + 1);
        CHECK(pl::allclose(got[0], want[0], tolerance, tolerance));
        CHECK(pl::allclose(got[1], c, 0, 0));
      }
    });
  }

  // Operands zeroed outside one range of rows along their contracted dims (megablox tgmm's rows of a
  // group, the seed's select of each operand): the compiled dot sums over that range alone
  // (jit/llvm/gemm.h, KSpan), on the f32 tile and the vdpbf16ps pairs, whose edge pairs zero the
  // element outside it. Rows outside hold inf and NaN, which must not reach the sums (0 x inf);
  // ranges empty, whole, clamped at both ends, inside one pair, with odd and even ends.
  TEST_CASE("dot forms: a dot of operands zeroed outside one range of k agrees with the interpreter") {
    const int64_t m = 13, k = 70, n = 70;
    struct Case {
      int32_t offset, start, end;
    };
    const Case cases[] = {{0, 0, 70},  {10, 13, 47}, {0, 4, 6},   {5, 8, 9},   {0, 5, 5},
                          {-10, -20, 100}, {0, 33, 34}, {100, 0, 50}, {-3, 0, 64}, {2, 7, 200}};
    struct Layout {
      const char* name;
      bool lhs_t, rhs_t;
    };
    const Layout layouts[] = {{"x @ y", false, false}, {"x.T @ y", true, false}, {"x @ y.T", false, true}};
    auto run_masked = [](const Layout& l, bool accumulate, const pl::Array& bounds, const pl::Array& x,
                         const pl::Array& y, const pl::Array& c, const pl::CallOptions& options) {
      auto kernel = [l, accumulate](pl::Ref b, pl::Ref xr, pl::Ref yr, pl::Ref cr, pl::Ref o) {
        const pl::Value offset = b[0], start = b[1], end = b[2];
        auto masked = [&](pl::Value v, int dim) {
          const pl::Value rows = pl::iota(v.shape(), dim) + offset;
          return pl::select((rows >= start) && (rows < end), v, pl::zeros(v.shape(), v.dtype()));
        };
        const int64_t lc = l.lhs_t ? 0 : 1, rc = l.rhs_t ? 1 : 0;
        const pl::Value product =
            pl::dot_general(masked(xr(), static_cast<int>(lc)), masked(yr(), static_cast<int>(rc)),
                            pl::DotDimensionNumbers{{{lc}, {rc}}, {}}, pl::f32);
        if (!accumulate) {
          o() = product;
          return;
        }
        o() = cr();
        o() += product;
      };
      return pl::pallas_call(kernel, pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1},
                             pl::ShapeDtype(c.shape(), pl::f32), options)(bounds, x, y, c);
    };
    on_runnable_targets([&](const pl::CallOptions& compiled) {
      for (const Layout& l : layouts)
        for (pl::DType dt : {pl::f32, pl::bf16})
          for (const Case& cs : cases) {
            INFO(l.name << ", " << pl::dtype_name(dt) << ", rows + " << cs.offset << " in [" << cs.start << ", " << cs.end << ")");
            // Element (r, kk) of x (m x k) and (kk, j) of y (k x n), stored transposed where the layout says.
            std::vector<float> xs(m * k), ys(k * n);
            const std::vector<float> xr = pl::Array::random_normal({m * k}, pl::f32, 11).to_vector<float>(),
                                     yr = pl::Array::random_normal({k * n}, pl::f32, 12).to_vector<float>();
            for (int64_t kk = 0; kk < k; ++kk) {
              const bool kept = kk + cs.offset >= cs.start && kk + cs.offset < cs.end;
              for (int64_t r = 0; r < m; ++r)
                xs[l.lhs_t ? kk * m + r : r * k + kk] = kept ? xr[r * k + kk] : std::numeric_limits<float>::infinity();
              for (int64_t j = 0; j < n; ++j)
                ys[l.rhs_t ? j * k + kk : kk * n + j] = kept ? yr[kk * n + j] : std::numeric_limits<float>::quiet_NaN();
            }
            const pl::Array x = pl::Array::from_vector(xs, l.lhs_t ? pl::Shape{k, m} : pl::Shape{m, k}).astype(dt),
                            y = pl::Array::from_vector(ys, l.rhs_t ? pl::Shape{n, k} : pl::Shape{k, n}).astype(dt),
                            c = pl::Array::random_normal({m, n}, pl::f32, 13),
                            bounds = pl::Array::from_vector(std::vector<int32_t>{cs.offset, cs.start, cs.end}, {3});
            for (bool accumulate : {false, true}) {
              INFO(std::string(accumulate ? "o() += dot" : "o() = dot"));
              const pl::Array got = run_masked(l, accumulate, bounds, x, y, c, compiled),
                              want = run_masked(l, accumulate, bounds, x, y, c, testing::interpret());
              const double tolerance = 1e-6 * static_cast<double>(k + 1);
              CHECK(pl::allclose(got, want, tolerance, tolerance));
            }
          }
    });
  }

  // Compiled for every named target (any host can compile for any target): each form's code (lhs
  // transposed, rhs transposed, batched) holds
  // the tile of its dtype, as the plain form's does (target_test.cpp), and no scalar multiply-add
  // loop: 16 zmm FMAs (8 x 32) or 12 ymm FMAs (6 x 16) for f32, 16 vdpbf16ps for bf16 x bf16 on
  // AVX512_BF16, 16 vpdpbusd for int8 on AVX512_VNNI.
  // A matmul grid (i, j, k) over small blocks: each B block, a parameter read in place, is packed once
  // per run and reused when i moves on, after all 32 of them (more than the 16 slots the packed-B
  // cache once had) were visited; blocks of a transposed rhs are the cache's column-major case.
  TEST_CASE("dot forms: a grid reusing every packed B block after visiting all of them agrees with the interpreter") {
    constexpr int64_t m = 16, k = 64, n = 128, bm = 8, bk = 8, bn = 32;
    for (bool rhs_t : {false, true}) {
      INFO(std::string(rhs_t ? "x @ y.T" : "x @ y"));
      auto kernel = [rhs_t](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
        pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
        acc() += pl::dot_general(x(), y(), {{{1}, {rhs_t ? 1 : 0}}, {}}, pl::f32);
        pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc(); });
      };
      auto y_map = [rhs_t](pl::Value, pl::Value j, pl::Value kk) { return rhs_t ? pl::idx(j, kk) : pl::idx(kk, j); };
      const pl::GridSpec grid{
          .grid = {m / bm, n / bn, k / bk},
          .in_specs = {pl::BlockSpec({bm, bk}, [](pl::Value i, pl::Value, pl::Value kk) { return pl::idx(i, kk); }),
                       rhs_t ? pl::BlockSpec({bn, bk}, y_map) : pl::BlockSpec({bk, bn}, y_map)},
          .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
          .scratch_shapes = {pl::VMEM({bm, bn}, pl::f32)}};
      for (pl::DType dt : {pl::f32, pl::bf16}) {
        INFO("dtype " << pl::dtype_name(dt));
        const pl::Array x = pl::Array::random_normal({m, k}, dt, 6),
                        y = pl::Array::random_normal(rhs_t ? pl::Shape{n, k} : pl::Shape{k, n}, dt, 7);
        const pl::Array want =
            pl::pallas_call(kernel, grid, pl::ShapeDtype({m, n}, pl::f32), testing::interpret())(x, y);
        on_runnable_targets([&](const pl::CallOptions& compiled) {
          const double tolerance = 1e-6 * static_cast<double>(k + 1);
          CHECK(pl::allclose(pl::pallas_call(kernel, grid, pl::ShapeDtype({m, n}, pl::f32), compiled)(x, y), want,
                             tolerance, tolerance));
        });
      }
    }
  }

  // A batch of B matrices (megablox gmm's rhs, one per group) has slots for one matrix's blocks: the
  // next matrix's blocks take the slots the last one's leave. Walked one matrix after the other
  // (blocks recurring within their matrix: packed once each) and with the matrix index innermost
  // (every step's block evicting the last one's from its slot: packed at every step), both agree
  // with the interpreter.
  TEST_CASE("dot forms: a batch of B matrices sharing the packed-B slots agrees with the interpreter") {
    constexpr int64_t groups = 3, m = 16, k = 32, n = 64, bm = 8, bk = 8, bn = 32;
    auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
      pl::when(pl::program_id(3) == 0, [&] { acc() = pl::zeros_like(acc); });
      acc() += pl::dot(x(), y(), pl::f32);
      pl::when(pl::program_id(3) == pl::num_programs(3) - 1, [&] { o() = acc(); });
    };
    for (bool matrix_outermost : {true, false}) {
      INFO((matrix_outermost ? "matrices one after the other" : "matrix index innermost"));
      // Grid (g, i, j, kk) or (i, j, g, kk): g picks the matrix of y and the output.
      auto dims = [matrix_outermost](pl::Value a, pl::Value b, pl::Value c) {
        return matrix_outermost ? std::array{a, b, c} : std::array{c, a, b};
      };
      const pl::GridSpec grid{
          .grid = matrix_outermost ? std::vector<int64_t>{groups, m / bm, n / bn, k / bk}
                                   : std::vector<int64_t>{m / bm, n / bn, groups, k / bk},
          .in_specs = {pl::BlockSpec({bm, bk},
                                     [dims](pl::Value a, pl::Value b, pl::Value c, pl::Value kk) {
                                       return pl::idx(dims(a, b, c)[1], kk);
                                     }),
                       pl::BlockSpec({pl::squeezed, bk, bn},
                                     [dims](pl::Value a, pl::Value b, pl::Value c, pl::Value kk) {
                                       const auto [g, i, j] = dims(a, b, c);
                                       return pl::idx(g, kk, j);
                                     })},
          .out_specs = {pl::BlockSpec({pl::squeezed, bm, bn},
                                      [dims](pl::Value a, pl::Value b, pl::Value c, pl::Value) {
                                        const auto [g, i, j] = dims(a, b, c);
                                        return pl::idx(g, i, j);
                                      })},
          .scratch_shapes = {pl::VMEM({bm, bn}, pl::f32)}};
      for (pl::DType dt : {pl::f32, pl::bf16}) {
        INFO("dtype " << pl::dtype_name(dt));
        const pl::Array x = pl::Array::random_normal({m, k}, dt, 8), y = pl::Array::random_normal({groups, k, n}, dt, 9);
        const pl::ShapeDtype out({groups, m, n}, pl::f32);
        const pl::Array want = pl::pallas_call(kernel, grid, out, testing::interpret())(x, y);
        on_runnable_targets([&](const pl::CallOptions& compiled) {
          const double tolerance = 1e-6 * static_cast<double>(k + 1);
          CHECK(pl::allclose(pl::pallas_call(kernel, grid, out, compiled)(x, y), want, tolerance, tolerance));
        });
      }
    }
  }

  // Dots at several sites of one kernel on the same B blocks share the packed-B cache when they pack
  // alike (the whole-block dots of even i and the half-block dots of odd i), and keep apart the
  // packings that differ (the same bf16 block as bf16 pairs for a bf16 lhs, as f32 panels for an
  // f32 one): every site reads the packing its own tile expects.
  TEST_CASE("dot forms: dots at several sites on the same B blocks agree with the interpreter") {
    constexpr int64_t m = 32, k = 64, n = 64, bm = 8, bk = 16, bn = 32;
    auto kernel = [](pl::Ref xb, pl::Ref xf, pl::Ref y, pl::Ref o, pl::Ref acc) {
      pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
      pl::cond(
          pl::program_id(0) % 2 == 0,
          [&] {
            acc() += pl::dot(xb(), y(), pl::f32);
            acc() += pl::dot(xf(), y(), pl::f32);
          },
          [&] {
            for (int64_t h = 0; h < 2; ++h) {
              pl::Ref rows = acc.at(pl::ds(h * bm / 2, bm / 2), pl::all);
              rows() += pl::dot(xb.at(pl::ds(h * bm / 2, bm / 2), pl::all)(), y(), pl::f32);
              rows() += pl::dot(xf.at(pl::ds(h * bm / 2, bm / 2), pl::all)(), y(), pl::f32);
            }
          });
      pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc(); });
    };
    auto x_block = pl::BlockSpec({bm, bk}, [](pl::Value i, pl::Value, pl::Value kk) { return pl::idx(i, kk); });
    const pl::GridSpec grid{
        .grid = {m / bm, n / bn, k / bk},
        .in_specs = {x_block, x_block,
                     pl::BlockSpec({bk, bn}, [](pl::Value, pl::Value j, pl::Value kk) { return pl::idx(kk, j); })},
        .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
        .scratch_shapes = {pl::VMEM({bm, bn}, pl::f32)}};
    const pl::Array xb = pl::Array::random_normal({m, k}, pl::bf16, 8), xf = pl::Array::random_normal({m, k}, pl::f32, 9),
                    y = pl::Array::random_normal({k, n}, pl::bf16, 10);
    const pl::Array want =
        pl::pallas_call(kernel, grid, pl::ShapeDtype({m, n}, pl::f32), testing::interpret())(xb, xf, y);
    on_runnable_targets([&](const pl::CallOptions& compiled) {
      const double tolerance = 1e-6 * static_cast<double>(2 * k + 1);
      CHECK(pl::allclose(pl::pallas_call(kernel, grid, pl::ShapeDtype({m, n}, pl::f32), compiled)(xb, xf, y), want,
                         tolerance, tolerance));
    });
  }

  TEST_CASE("dot forms: transposed and batched dots compile to the target's micro-kernel") {
    struct Lowered {
      std::vector<pl::PallasCall<pl::Array>> calls;
      std::vector<std::pair<std::string, const ir::Function*>> fns;  // (form and dtype, lowered IR)
    };
    static Lowered* lowered = [] {
      auto* l = new Lowered();
      l->calls.reserve(3 * std::size(kForms));
      for (const Form& form : {kForms[0], kForms[1], kForms[3]})
        for (pl::DType dt : {pl::f32, pl::bf16, pl::i8}) {
          const pl::DType out = dt == pl::i8 ? pl::i32 : pl::f32;
          auto kernel = [form, out](pl::Ref x, pl::Ref y, pl::Ref o) { o() = form.dot(x(), y(), out); };
          l->calls.push_back(pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(form.out(2, 64, 64), out)));
          const ir::Function& fn = l->calls.back().lowered(
              {pl::Array::zeros(form.lhs(2, 64, 64), dt), pl::Array::zeros(form.rhs(2, 64, 64), dt)});
          l->fns.emplace_back(std::string(form.name) + " " + std::string(pl::dtype_name(dt)), &fn);
        }
      return l;
    }();
    for (std::string_view name : jit::target_names()) {
      const jit::CpuTarget& t = jit::cpu_target(name);
      INFO("target " << t.str());
      for (const auto& [what, fn] : lowered->fns) {
        INFO("kernel " << what);
        const std::vector<jit::Instruction> code = jit::disassemble(jit::compile_object(*fn, name));
        auto count = [&](std::string_view mnemonic, std::string_view operand) {
          int n = 0;
          for (const jit::Instruction& i : code) n += i.mnemonic.starts_with(mnemonic) && i.text.find(operand) != std::string::npos;
          return n;
        };
        const bool bf16 = what.ends_with("bf16"), i8 = what.ends_with("i8");
        // On amx the 64 x 64 dots are whole AMX tiles (jit/llvm/amx_gemm.h).
        if (i8 && t.amx_int8) CHECK(count("tdpbssd", "") >= 4);
        else if (bf16 && t.amx_bf16) CHECK(count("tdpbf16ps", "") >= 4);
        else if (i8 && t.avx512_vnni) CHECK(count("vpdpbusd", "zmm") >= 16);
        else if (bf16 && t.avx512_bf16 && !t.bf16_on_fma) CHECK(count("vdpbf16ps", "zmm") >= 16);
        else if (!i8 && t.avx512) CHECK(count("vfmadd231ps", "zmm") >= 16);
        else if (!i8) CHECK(count("vfmadd231ps", "ymm") >= 12);
        if (!i8) CHECK(count("vfmadd231ss", "") == 0);  // no scalar dot loop
      }
    }
  }
}
