// Example 13: flash attention, forward and backward, from the kernel library (ops/attention).
//
// Two documents of different lengths are packed into each sequence (segment ids keep them apart),
// attention is causal with a soft cap on the logits, as in decoder training. The forward keeps an
// online softmax in VMEM scratch over the kv blocks, never forming the seq x seq matrix, and
// returns the logsumexp the backward needs. The forward is checked against the plain formula
// computed with host einsums (the seq x seq logits, masked and soft-maxed on the host); the
// backward is checked by directional derivatives: for a random direction u, <dq, u> must equal
// (L(q + eps u) - L(q - eps u)) / (2 eps) with L = sum(o * dout), evaluated by the forward kernel
// in f64-accumulated host arithmetic. Both backends run and their results are compared.
//
//   13_flash_attention [seq head_dim]     (default 256 64)
#include <tessera/attention.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "examples/example_util.h"

namespace pl = tessera;
namespace fa = tessera::attention;

namespace {

constexpr int64_t kBatch = 2, kHeads = 4;
constexpr double kCap = 20.0;

// Document ids: the first document takes 3/8 of the sequence in batch row 0 and 5/8 in row 1.
pl::Array document_ids(int64_t seq) {
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < seq; ++i) ids.push_back(i < seq * (3 + 2 * b) / 8 ? 0 : 1);
  return pl::Array::from_vector(ids, {kBatch, seq});
}

// softmax(mask(cap(q k^T * scale))) v with the logits from a host einsum, the softmax on the host.
pl::Array plain_attention(const pl::Array& q, const pl::Array& k, const pl::Array& v, const pl::Array& ids,
                          double scale) {
  const int64_t seq = q.shape()[2];
  std::vector<double> s = pl::einsum("bhqd,bhkd->bhqk", q, k, pl::f32).to_vector<double>();
  const std::vector<int32_t> doc = ids.to_vector<int32_t>();
  for (int64_t bh = 0; bh < kBatch * kHeads; ++bh)
    for (int64_t i = 0; i < seq; ++i) {
      double* row = s.data() + (bh * seq + i) * seq;
      const int32_t* d = doc.data() + bh / kHeads * seq;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        row[j] = d[j] == d[i] ? kCap * std::tanh(row[j] * scale / kCap) : -INFINITY;
        mx = std::max(mx, row[j]);
      }
      for (int64_t j = 0; j < seq; ++j) sum += row[j] = j <= i ? std::exp(row[j] - mx) : 0.0;
      for (int64_t j = 0; j < seq; ++j) row[j] /= sum;
    }
  return pl::einsum("bhqk,bhkd->bhqd", pl::Array::from_vector(s, {kBatch, kHeads, seq, seq}, pl::f32), v, pl::f32);
}

// sum(a * b) and a + eps * b, on the host in double.
double inner(const pl::Array& a, const pl::Array& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}
pl::Array axpy(const pl::Array& a, double eps, const pl::Array& b) {
  return examples::host_map2(a, b, [eps](double x, double y) { return x + eps * y; });
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t seq = argc > 2 ? std::atoll(argv[1]) : 256, d = argc > 2 ? std::atoll(argv[2]) : 64;
  const pl::Shape shape{kBatch, kHeads, seq, d};
  const pl::Array q = pl::Array::random_normal(shape, pl::f32, 1), k = pl::Array::random_normal(shape, pl::f32, 2),
                  v = pl::Array::random_normal(shape, pl::f32, 3), dout = pl::Array::random_normal(shape, pl::f32, 4);
  const pl::Array ids = document_ids(seq);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const pl::Array want = plain_attention(q, k, v, ids, scale);
  std::printf("batch %lld, heads %lld, seq %lld, head_dim %lld: causal, two documents per sequence, soft cap %g\n",
              static_cast<long long>(kBatch), static_cast<long long>(kHeads), static_cast<long long>(seq),
              static_cast<long long>(d), kCap);

  auto options = [&](const pl::CallOptions& backend) {
    return fa::FlashOptions{.causal = true,
                            .sm_scale = scale,
                            .segment_ids = fa::SegmentIds{ids, ids},
                            .soft_cap = kCap,
                            .block_sizes = {.block_q = 64, .block_k = 64},
                            .interpret = backend.interpret};
  };

  int status = examples::run_in_every_backend("forward", [&](const pl::CallOptions& backend) {
    pl::Array o = fa::flash_attention(q, k, v, options(backend));
    pl::numerics::NumericsResult r = pl::numerics::compare(want, o, {.atol = 1e-4, .rtol = 1e-4, .region_grid = {2, 4}});
    // bf16 inputs: p is rounded to bf16 before its dot, as an MXU would take it.
    pl::Array o16 = fa::flash_attention(q.astype(pl::bf16), k.astype(pl::bf16), v.astype(pl::bf16), options(backend));
    const bool bf16_ok = examples::check("bf16 against the f32 reference", o16.astype(pl::f32), want, 3e-2, 3e-2);
    return examples::Outcome{r.passed && bf16_ok, o};
  }, 1e-4, 1e-4);

  status |= examples::run_in_every_backend("backward", [&](const pl::CallOptions& backend) {
    const fa::FlashOptions opt = options(backend);
    fa::Forward f = fa::flash_attention_with_lse(q, k, v, opt);
    fa::Gradients g = fa::flash_attention_bwd(q, k, v, f.o, f.lse, dout, opt);
    bool ok = true;
    const double eps = 1e-2;
    const char* names[] = {"dq", "dk", "dv"};
    for (int which = 0; which < 3; ++which) {
      const pl::Array u = pl::Array::random_normal(shape, pl::f32, 10 + static_cast<uint64_t>(which));
      auto loss_at = [&](double e) {
        pl::Array x[] = {q, k, v};
        x[which] = axpy(x[which], e, u);
        return inner(fa::flash_attention(x[0], x[1], x[2], opt), dout);
      };
      const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      const double analytic = inner(which == 0 ? g.dq : which == 1 ? g.dk : g.dv, u);
      const bool good = std::abs(fd - analytic) <= 5e-4 * (1 + std::abs(analytic));
      std::printf("  <%s, u> = %.6g, finite difference %.6g: %s\n", names[which], analytic, fd, good ? "PASS" : "FAIL");
      ok = ok && good;
    }
    return examples::Outcome{ok, g.dk};
  }, 1e-4, 1e-4);
  return status;
}
