// Flash attention forward and backward against a plain reference (softmax(q k^T * scale + mask) v
// in double, seq x seq matrices and all), in both backends, and their errors. Compiled calls run in
// differential mode (every kernel again in the interpreter, outputs compared, docs/design.md §4.14);
// interpreted calls poison uninitialised memory, so a read of an unwritten block shows as NaN.
#include <doctest/doctest.h>

#include <tessera/attention.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "jit/ir/parser.h"
#include "jit/lowering/memory_budget.h"
#include "tests/ops/reference_check.h"
#include "tests/support/capture.h"
#include "tests/support/kernels.h"
#include "tests/support/scoped_env.h"
#include "tests/support/user_error.h"

using namespace tessera;
namespace pl = tessera;
namespace fa = tessera::attention;
using doctest::Contains;

namespace {

// The reference, in double on the inputs' values: per (batch, head) the full logits matrix.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

struct Dims {
  int64_t b, h, sq, sk, d;
};
Dims dims_of(const pl::Array& q, const pl::Array& k) {
  return {q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3]};
}

// Forward, and the analytic gradients of sum(o * dout) when `dout` is given.
Reference reference(const pl::Array& q_arr, const pl::Array& k_arr, const pl::Array& v_arr, const fa::FlashOptions& opt,
                    const pl::Array* dout_arr = nullptr) {
  const Dims n = dims_of(q_arr, k_arr);
  const std::vector<double> q = q_arr.to_vector<double>(), k = k_arr.to_vector<double>(), v = v_arr.to_vector<double>();
  const std::vector<double> dout = dout_arr ? dout_arr->to_vector<double>() : std::vector<double>{};
  std::vector<int32_t> qs, ks;
  if (opt.segment_ids) {
    qs = opt.segment_ids->q.to_vector<int32_t>();
    ks = opt.segment_ids->kv.to_vector<int32_t>();
  }
  Reference r;
  r.o.assign(static_cast<size_t>(n.b * n.h * n.sq * n.d), 0);
  r.lse.assign(static_cast<size_t>(n.b * n.h * n.sq), 0);
  r.dq.assign(r.o.size(), 0);
  r.dk.assign(static_cast<size_t>(n.b * n.h * n.sk * n.d), 0);
  r.dv.assign(r.dk.size(), 0);
  std::vector<double> p(static_cast<size_t>(n.sq * n.sk)), t(p.size()), dp(p.size());
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.h; ++h) {
      const int64_t qo = (b * n.h + h) * n.sq * n.d, ko = (b * n.h + h) * n.sk * n.d;
      auto allowed = [&](int64_t i, int64_t j) {
        return (!opt.causal || j <= i) && (qs.empty() || qs[b * n.sq + i] == ks[b * n.sk + j]);
      };
      for (int64_t i = 0; i < n.sq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n.sk; ++j) {
          double s = 0;
          for (int64_t c = 0; c < n.d; ++c) s += q[qo + i * n.d + c] * k[ko + j * n.d + c];
          s *= opt.sm_scale;
          if (opt.soft_cap) {
            t[i * n.sk + j] = std::tanh(s / *opt.soft_cap);
            s = *opt.soft_cap * t[i * n.sk + j];
          }
          p[i * n.sk + j] = s;
          if (allowed(i, j)) mx = std::max(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < n.sk; ++j) {
          p[i * n.sk + j] = allowed(i, j) ? std::exp(p[i * n.sk + j] - mx) : 0;
          sum += p[i * n.sk + j];
        }
        for (int64_t j = 0; j < n.sk; ++j) p[i * n.sk + j] /= sum;
        r.lse[(b * n.h + h) * n.sq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < n.sk; ++j)
          for (int64_t c = 0; c < n.d; ++c) r.o[qo + i * n.d + c] += p[i * n.sk + j] * v[ko + j * n.d + c];
      }
      if (!dout_arr) continue;
      // dv = p^T dout; dp = dout v^T; ds = p (dp - rowsum(dout o)); through the cap and the scale;
      // dq = ds k; dk = ds^T q.
      for (int64_t i = 0; i < n.sq; ++i) {
        double di = 0;
        for (int64_t c = 0; c < n.d; ++c) di += dout[qo + i * n.d + c] * r.o[qo + i * n.d + c];
        for (int64_t j = 0; j < n.sk; ++j) {
          double dpij = 0;
          for (int64_t c = 0; c < n.d; ++c) {
            dpij += dout[qo + i * n.d + c] * v[ko + j * n.d + c];
            r.dv[ko + j * n.d + c] += p[i * n.sk + j] * dout[qo + i * n.d + c];
          }
          double ds = p[i * n.sk + j] * (dpij - di);
          if (opt.soft_cap) ds *= 1 - t[i * n.sk + j] * t[i * n.sk + j];
          ds *= opt.sm_scale;
          for (int64_t c = 0; c < n.d; ++c) {
            r.dq[qo + i * n.d + c] += ds * k[ko + j * n.d + c];
            r.dk[ko + j * n.d + c] += ds * q[qo + i * n.d + c];
          }
        }
      }
    }
  return r;
}

// Segment ids of `seq` positions in runs of uneven lengths (3, 5, 7, ...), different per batch row;
// q and kv get the same ids, so every query has a key of its segment (its own position).
pl::Array segments(int64_t batch, int64_t seq) {
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    int32_t id = 0, left = 3 + static_cast<int32_t>(b);
    for (int64_t i = 0; i < seq; ++i) {
      ids.push_back(id);
      if (--left == 0) left = 3 + 2 * ++id;
    }
  }
  return pl::Array::from_vector(ids, {batch, seq});
}

// Tolerances on |got - want| / (1 + |want|), against the double reference on the same (rounded)
// inputs. f32: the blocks' dots sum in another order than the reference and the online softmax
// rescales; the worst seen is under 1e-6. bf16: p and ds are rounded to bf16 (2^-9 relative) before
// their dots, as Pallas feeds the MXU, and the outputs are bf16 themselves; the worst seen is about
// 6e-3.
double fwd_tol(pl::DType dt) { return dt == pl::bf16 ? 1.5e-2 : 5e-6; }
double bwd_tol(pl::DType dt) { return dt == pl::bf16 ? 2e-2 : 1e-5; }

using testing::close_to_reference;

// The lowered IR of every kernel `f` builds, as TESSERA_DUMP_IR=check_vmem_budget prints it after
// the last pass: what the library's calls allocate is not reachable from outside them otherwise.
std::vector<ir::Function> lowered_kernels(const std::function<void()>& f) {
  const std::string text = [&] {
    testing::ScopedEnv dump("TESSERA_DUMP_IR", "check_vmem_budget");
    return testing::capture_stderr(f);
  }();
  const std::string header = "// ---- tessera IR of `";
  std::vector<ir::Function> out;
  for (size_t at = text.find(header); at != std::string::npos;) {
    const size_t body = text.find('\n', at) + 1, next = text.find(header, body);
    out.push_back(ir::parse(text.substr(body, next == std::string::npos ? std::string::npos : next - body)));
    at = next;
  }
  return out;
}

// What a lowered kernel holds beyond its operands: the type of every value an op makes — the
// buffers it allocates (scratch, run_scoped, the interpreter's block copies), the block windows it
// works on and every block it computes — and its VMEM bytes. The operands (the kernel's parameters,
// the whole arrays in HBM) are region arguments, not op results, so they are not in it.
struct Footprint {
  std::string types;  // sorted, one each
  int64_t largest_dim = 0;
  int64_t vmem_bytes = 0;
};
Footprint footprint(const ir::Function& fn) {
  Footprint f;
  std::set<std::string> types;
  for (const ir::Op& op : fn.ops)
    for (ir::ValueId r : op.results) {
      const Type& t = fn.type(r);
      types.insert(type_str(t));
      for (int64_t d : t.shape) f.largest_dim = std::max(f.largest_dim, d);
    }
  for (const std::string& t : types) f.types += t + "; ";
  f.vmem_bytes = passes::vmem_bytes(fn);
  return f;
}

struct Case {
  const char* name;
  bool causal = false, segments = false;
  std::optional<double> cap;
};
const Case kCases[] = {{"plain"},
                       {"causal", true},
                       {"segment ids", false, true},
                       {"soft cap", false, false, 2.0},
                       {"causal, segment ids and soft cap", true, true, 2.0}};

// Every case, forward and backward, f32 and bf16, compiled (checked against the interpreter) and
// interpreted, on `q_shape` / `kv_shape` with `blocks`.
void check_all(const pl::Shape& q_shape, const pl::Shape& kv_shape, fa::BlockSizes blocks) {
  for (pl::DType dt : {pl::f32, pl::bf16}) {
    const pl::Array q = pl::Array::random_normal(q_shape, dt, 1), k = pl::Array::random_normal(kv_shape, dt, 2),
                    v = pl::Array::random_normal(kv_shape, dt, 3), dout = pl::Array::random_normal(q_shape, dt, 4);
    for (const Case& c : kCases) {
      fa::FlashOptions opt{.causal = c.causal, .sm_scale = 1.0 / std::sqrt(double(q_shape[3])), .soft_cap = c.cap,
                           .block_sizes = blocks};
      if (c.segments) {
        // Equal ids need equal lengths; causal with segments keeps each query's own position.
        REQUIRE(q_shape[2] == kv_shape[2]);
        opt.segment_ids = fa::SegmentIds{segments(q_shape[0], q_shape[2]), segments(q_shape[0], kv_shape[2])};
      }
      const Reference want = reference(q, k, v, opt, &dout);
      for (auto& b : testing::backends()) {
        INFO(c.name << ", " << pl::dtype_name(dt) << ", " << b.name);
        fa::FlashOptions o = opt;
        o.interpret = b.options.interpret;
        o.check_against_interpreter = !b.options.interpret.has_value();
        fa::Forward f = fa::flash_attention_with_lse(q, k, v, o);
        CHECK(f.o.dtype() == dt);
        CHECK(f.o.shape() == q_shape);
        CHECK(f.lse.shape() == pl::Shape{q_shape[0], q_shape[1], q_shape[2]});
        close_to_reference(f.o, want.o, fwd_tol(dt));
        close_to_reference(f.lse, want.lse, fwd_tol(pl::f32));
        // The backward from the reference's o and lse, so its error is its own.
        const pl::Array o_ref = pl::Array::from_vector(want.o, q_shape, dt);
        const pl::Array lse_ref = pl::Array::from_vector(want.lse, f.lse.shape(), pl::f32);
        fa::Gradients g = fa::flash_attention_bwd(q, k, v, o_ref, lse_ref, dout, o);
        CHECK(g.dq.dtype() == dt);
        close_to_reference(g.dq, want.dq, bwd_tol(dt));
        close_to_reference(g.dk, want.dk, bwd_tol(dt));
        close_to_reference(g.dv, want.dv, bwd_tol(dt));
      }
    }
  }
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("attention: the reference's gradients match finite differences of sum(o * dout)") {
    const pl::Shape shape{1, 2, 6, 4};
    const pl::Array q = pl::Array::random_normal(shape, pl::f64, 5), k = pl::Array::random_normal(shape, pl::f64, 6),
                    v = pl::Array::random_normal(shape, pl::f64, 7), dout = pl::Array::random_normal(shape, pl::f64, 8);
    const fa::FlashOptions opt{.causal = true, .sm_scale = 0.7, .segment_ids = fa::SegmentIds{segments(1, 6), segments(1, 6)},
                               .soft_cap = 1.5};
    const Reference r = reference(q, k, v, opt, &dout);
    const std::vector<double> w = dout.to_vector<double>();
    auto loss = [&](const pl::Array& qq, const pl::Array& kk, const pl::Array& vv) {
      const std::vector<double> o = reference(qq, kk, vv, opt).o;
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
      return s;
    };
    const double eps = 1e-6;
    int checked = 0;
    for (int which = 0; which < 3; ++which) {
      const std::vector<double>& grad = which == 0 ? r.dq : which == 1 ? r.dk : r.dv;
      for (size_t i = 0; i < grad.size(); i += 5) {
        std::vector<pl::Array> plus{q, k, v}, minus{q, k, v};
        std::vector<double> x = plus[which].to_vector<double>();
        x[i] += eps;
        plus[which] = pl::Array::from_vector(x, shape, pl::f64);
        x[i] -= 2 * eps;
        minus[which] = pl::Array::from_vector(x, shape, pl::f64);
        const double fd = (loss(plus[0], plus[1], plus[2]) - loss(minus[0], minus[1], minus[2])) / (2 * eps);
        INFO("operand " << which << ", element " << i);
        CHECK(grad[i] == doctest::Approx(fd).epsilon(1e-6).scale(1));
        ++checked;
      }
    }
    CHECK(checked == 3 * 10);
  }

  TEST_CASE("attention: forward and backward match the reference (several blocks, bq != bk)") {
    // 64 positions in q blocks of 32 and kv blocks of 16: causal skips kv blocks above the diagonal
    // and masks inside the diagonal blocks. The dk/dv kernel uses its own blocks (16, 32).
    check_all({2, 2, 64, 32}, {2, 2, 64, 32}, {.block_q = 32, .block_k = 16, .block_q_dkv = 16, .block_k_dkv = 32});
  }

  TEST_CASE("attention: odd shapes (seq_q != seq_k, blocks cut to short sequences, odd head_dim)") {
    // seq_q 24 (blocks of 8), seq_k 40 (blocks of 8; 128 cut to 40 for dk/dv), head_dim 12.
    const pl::Shape qs{1, 3, 24, 12}, ks{1, 3, 40, 12};
    for (pl::DType dt : {pl::f32, pl::bf16}) {
      const pl::Array q = pl::Array::random_normal(qs, dt, 9), k = pl::Array::random_normal(ks, dt, 10),
                      v = pl::Array::random_normal(ks, dt, 11), dout = pl::Array::random_normal(qs, dt, 12);
      for (bool causal : {false, true}) {
        fa::FlashOptions opt{.causal = causal, .sm_scale = 0.3, .block_sizes = {.block_q = 8, .block_k = 8, .block_k_dkv = 128}};
        const Reference want = reference(q, k, v, opt, &dout);
        for (auto& b : testing::backends()) {
          INFO(pl::dtype_name(dt) << ", causal " << causal << ", " << b.name);
          fa::FlashOptions o = opt;
          o.interpret = b.options.interpret;
          o.check_against_interpreter = !b.options.interpret.has_value();
          fa::Forward f = fa::flash_attention_with_lse(q, k, v, o);
          close_to_reference(f.o, want.o, fwd_tol(dt));
          close_to_reference(f.lse, want.lse, fwd_tol(pl::f32));
          fa::Gradients g = fa::flash_attention_bwd(q, k, v, f.o, f.lse, dout, o);
          close_to_reference(g.dq, want.dq, bwd_tol(dt));
          close_to_reference(g.dk, want.dk, bwd_tol(dt));
          close_to_reference(g.dv, want.dv, bwd_tol(dt));
        }
      }
    }
  }

  TEST_CASE("attention: flash_attention returns the forward's o, and repeated calls give the same result") {
    const pl::Shape s{1, 1, 32, 16};
    const pl::Array q = pl::Array::random_normal(s, pl::f32, 13), k = pl::Array::random_normal(s, pl::f32, 14),
                    v = pl::Array::random_normal(s, pl::f32, 15);
    const fa::FlashOptions opt{.causal = true, .block_sizes = {.block_q = 16, .block_k = 16}};
    const pl::Array a = fa::flash_attention(q, k, v, opt), b = fa::flash_attention(q, k, v, opt);
    CHECK(pl::max_abs_diff(a, fa::flash_attention_with_lse(q, k, v, opt).o) == 0);
    CHECK(pl::max_abs_diff(a, b) == 0);
    close_to_reference(a, reference(q, k, v, opt).o, fwd_tol(pl::f32));
  }

  TEST_CASE("attention: memory beyond the operands does not grow with the sequence, forward and backward") {
    // Forward and backward at 256 and 4096 positions compiled, 256 and 1024 interpreted (blocks of
    // 128; the interpreter's time grows as seq^2), plain and causal: every value their kernels make
    // has the same type at both lengths and no dim longer than a block, and their VMEM is the same;
    // the forward's is m, l and acc (bq x 1, bq x 1 and bq x head_dim f32 scratch) and its two
    // output blocks. A (seq, seq) or (seq, ...) buffer or block anywhere fails it. head_dim 24 keeps
    // these specialisations this test's own.
    const int64_t bq = 128, d = 24;
    const int64_t fwd_vmem = (bq + bq + bq * d) * 4 + (bq * d + bq) * 4;
    for (bool causal : {false, true})
      for (bool interpreted : {false, true}) {
        INFO("causal " << causal << ", " << std::string(interpreted ? "interpreted" : "compiled"));
        std::vector<Footprint> fwd, bwd;  // per length: the forward's kernel; the backward's dk/dv and dq
        for (int64_t seq : {int64_t{256}, interpreted ? int64_t{1024} : int64_t{4096}}) {
          INFO("seq " << seq);
          const pl::Shape s{1, 1, seq, d};
          const pl::Array q = pl::Array::random_normal(s, pl::f32, 16), k = pl::Array::random_normal(s, pl::f32, 17),
                          dout = pl::Array::random_normal(s, pl::f32, 18);
          fa::FlashOptions opt{.causal = causal, .sm_scale = 0.2, .block_sizes = {.block_q = bq, .block_k = bq}};
          if (interpreted) opt.interpret = pl::InterpretParams{};
          // The forward builds one kernel, the backward two (dk/dv, dq); each twice where
          // TESSERA_CHECK_AGAINST_INTERPRETER also builds the interpreter's. Kernels are compared
          // by their position across the lengths.
          fa::Forward f;
          const std::vector<ir::Function> forward = lowered_kernels([&] { f = fa::flash_attention_with_lse(q, k, k, opt); });
          const std::vector<ir::Function> backward =
              lowered_kernels([&] { fa::flash_attention_bwd(q, k, k, f.o, f.lse, dout, opt); });
          REQUIRE(!forward.empty());
          REQUIRE(backward.size() >= 2);
          for (const ir::Function& fn : forward) {
            CHECK(footprint(fn).largest_dim == bq);
            CHECK(footprint(fn).vmem_bytes == fwd_vmem);
          }
          for (const ir::Function& fn : backward) CHECK(footprint(fn).largest_dim == bq);
          fwd.push_back(footprint(forward[0]));
          bwd.push_back(footprint(backward[0]));
          bwd.push_back(footprint(backward[1]));
        }
        CHECK(fwd[0].types == fwd[1].types);
        for (int kernel : {0, 1}) {
          INFO("backward kernel " << kernel);
          CHECK(bwd[kernel].types == bwd[2 + kernel].types);
          CHECK(bwd[kernel].vmem_bytes == bwd[2 + kernel].vmem_bytes);
        }
      }
  }

  TEST_CASE("attention: misuse is a UserError naming what was given and how to fix it") {
    const pl::Array q = pl::Array::zeros({1, 2, 48, 8}, pl::f32), k = pl::Array::zeros({1, 2, 48, 8}, pl::f32);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, k, k, {.block_sizes = {.block_q = 32}}),
                         Contains("flash_attention: block_q = 32 does not divide seq_q = 48"), UserError);
    testing::check_user_error([&] { fa::flash_attention(q, k, k, {.block_sizes = {.block_q = 16, .block_k = 20}}); },
                     "flash_attention: block_k = 20 does not divide seq_k = 48",
                     "an operand of shape (1, 2, 48, 8) with block_k = 20",
                     "pass a block_k that divides 48 (the largest up to 20 is 16), or pad the sequence to a multiple of 20", "attention_test.cpp");
    CHECK_THROWS_WITH_AS(fa::flash_attention_bwd(q, k, k, q, pl::Array::zeros({1, 2, 48}, pl::f32), q,
                                                 {.block_sizes = {.block_q = 16, .block_k = 16, .block_q_dkv = 36}}),
                         Contains("flash_attention_bwd: block_q_dkv = 36 does not divide seq_q = 48"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, k, k, {.block_sizes = {.block_q = 0}}),
                         Contains("flash_attention: block_q must be positive"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q.reshape({2, 48, 8}), k, k),
                         Contains("'q' must be a 4-tensor [batch, heads, seq, head_dim]"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q.astype(pl::f16), k, k), Contains("'q' must be f32 or bf16"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, k.astype(pl::bf16), k.astype(pl::bf16)),
                         Contains("q, k and v must have one dtype"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, pl::Array::zeros({1, 2, 48, 4}, pl::f32), k),
                         Contains("q, k and v do not fit together"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, pl::Array::zeros({1, 2, 0, 8}, pl::f32), pl::Array::zeros({1, 2, 0, 8}, pl::f32)),
                         Contains("flash_attention: empty sequence or head dim"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, k, k, {.soft_cap = 0.0}), Contains("soft_cap must be positive and finite"),
                         UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention(q, k, k, {.sm_scale = std::numeric_limits<double>::infinity()}),
                         Contains("sm_scale must be finite"), UserError);
    CHECK_THROWS_WITH_AS(
        fa::flash_attention(q, k, k, {.segment_ids = fa::SegmentIds{pl::Array::zeros({1, 48}, pl::i32), pl::Array::zeros({1, 47}, pl::i32)}}),
        Contains("segment ids 'kv' must be i32 [batch, seq] = (1, 48)"), UserError);
    CHECK_THROWS_WITH_AS(fa::flash_attention_bwd(q, k, k, q, pl::Array::zeros({1, 2, 47}, pl::f32), q),
                         Contains("flash_attention_bwd: o, dout and lse do not fit q"), UserError);
  }

  TEST_CASE("attention: an invalid TESSERA_INTERPRET fails the op at the user's line, and the next call works") {
    // The op's kept call reads the variable (dsl/kept_call.h): the error is the op's, at its line.
    const pl::Shape s{1, 1, 32, 16};
    const pl::Array q = pl::Array::random_normal(s, pl::f32, 23), k = pl::Array::random_normal(s, pl::f32, 24),
                    v = pl::Array::random_normal(s, pl::f32, 25);
    {
      const testing::ScopedEnv interpret("TESSERA_INTERPRET", "maybe");
      testing::check_user_error_at(__LINE__, "attention_test.cpp", [&] { (void)fa::flash_attention(q, k, v); },
                                   "TESSERA_INTERPRET=maybe");
    }
    close_to_reference(fa::flash_attention(q, k, v), reference(q, k, v, {}).o, fwd_tol(pl::f32));
  }
}
