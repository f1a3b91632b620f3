// Flash attention forward (ops/attention) against the plain way, measured in the same run: per
// (batch, head), S = q k^T with OpenBLAS sgemm (seq x seq, materialised), the softmax of S * scale
// (and the causal mask) in a plain C++ loop, then o = P v with sgemm. Sequences 2048, 4096 and 8192,
// head_dim 64 and 128, non-causal and causal, tessera f32 and bf16 (both against the f32
// reference), on 1 and 2 threads (OpenBLAS's threads and the softmax's rows split over as many
// threads; tessera's parallel grid over its pool). batch x heads shrinks as the sequence grows, so
// every call takes a comparable time. The reference does not skip the masked half of a causal S:
// that is what a plain implementation does, and flash attention's saving.
//
//   attention [--json FILE] [--runs N] [--seqs 2048,4096] [--dims 64,128] [--bq N] [--bk N]
//             [--backward]       (also dq, dk, dv against the plain backward: dv = P^T dout,
//                                 dP = dout v^T, dS = P (dP - rowsum(dout o)) scale, dq = dS k, dk = dS^T q)
//             [--only-tessera]   (tessera's forward alone, 1 thread: a run to profile with perf)
#include <tessera/attention.hpp>

#include <cblas.h>

#include <cmath>
#include <sstream>
#include <thread>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "jit/llvm/target.h"

namespace pl = tessera;
namespace fa = tessera::attention;

namespace {

// C (m x n) = op(A) op(B), row-major, op transposing when asked; lda / ldb as stored.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
              c, static_cast<int>(n));
}

// fn(lo, hi) over rows [0, n) cut into `threads` contiguous ranges, one thread each.
void parallel_rows(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  fn(0, n / threads);
  for (std::thread& t : pool) t.join();
}

// The plain attention of one call: per (batch, head) P in a seq x seq buffer (and dP for the
// backward).
class PlainAttention {
 public:
  PlainAttention(int64_t seq, int64_t d, bool backward)
      : seq_(seq), d_(d), s_(static_cast<size_t>(seq * seq)), dp_(backward ? s_.size() : 0) {}

  void forward(const float* q, const float* k, const float* v, float* o, int64_t bh, float scale, bool causal,
               int threads) {
    for (int64_t i = 0; i < bh; ++i) {
      const int64_t off = i * seq_ * d_;
      probabilities(q + off, k + off, scale, causal, threads);
      gemm(false, false, seq_, d_, seq_, s_.data(), seq_, v + off, d_, o + off);
    }
  }

  // dv = P^T dout, dP = dout v^T, dS = P (dP - rowsum(dout o)) scale, dq = dS k, dk = dS^T q.
  void backward(const float* q, const float* k, const float* v, const float* o, const float* dout, float* dq,
                float* dk, float* dv, int64_t bh, float scale, bool causal, int threads) {
    for (int64_t i = 0; i < bh; ++i) {
      const int64_t off = i * seq_ * d_;
      probabilities(q + off, k + off, scale, causal, threads);
      gemm(true, false, seq_, d_, seq_, s_.data(), seq_, dout + off, d_, dv + off);
      gemm(false, true, seq_, seq_, d_, dout + off, d_, v + off, d_, dp_.data());
      parallel_rows(seq_, threads, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          float di = 0;
          for (int64_t c = 0; c < d_; ++c) di += dout[off + r * d_ + c] * o[off + r * d_ + c];
          float* p = s_.data() + r * seq_;
          const float* dp = dp_.data() + r * seq_;
          for (int64_t c = 0; c < seq_; ++c) p[c] = p[c] * (dp[c] - di) * scale;
        }
      });
      gemm(false, false, seq_, d_, seq_, s_.data(), seq_, k + off, d_, dq + off);
      gemm(true, false, seq_, d_, seq_, s_.data(), seq_, q + off, d_, dk + off);
    }
  }

 private:
  // s_ = softmax(mask(q k^T * scale)) by rows.
  void probabilities(const float* q, const float* k, float scale, bool causal, int threads) {
    gemm(false, true, seq_, seq_, d_, q, d_, k, d_, s_.data());
    parallel_rows(seq_, threads, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        float* row = s_.data() + r * seq_;
        const int64_t n = causal ? r + 1 : seq_;
        float mx = -INFINITY;
        for (int64_t c = 0; c < n; ++c) mx = std::max(mx, row[c] * scale);
        float sum = 0;
        for (int64_t c = 0; c < n; ++c) sum += row[c] = std::exp(row[c] * scale - mx);
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < n; ++c) row[c] *= inv;
        for (int64_t c = n; c < seq_; ++c) row[c] = 0;
      }
    });
  }

  int64_t seq_, d_;
  std::vector<float> s_, dp_;
};

std::vector<int64_t> int_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "3").c_str());
  const std::vector<int64_t> seqs = int_list(bench::arg(argc, argv, "--seqs", "2048,4096,8192"));
  const std::vector<int64_t> dims = int_list(bench::arg(argc, argv, "--dims", "64,128"));
  const bool only_tessera = bench::has_flag(argc, argv, "--only-tessera");
  const bool backward = bench::has_flag(argc, argv, "--backward");
  const int64_t bq = std::stoll(bench::arg(argc, argv, "--bq", "128")), bk = std::stoll(bench::arg(argc, argv, "--bk", "128"));

  const pl::jit::HostCpu& host = pl::jit::host_cpu();
  std::printf("CPU: %s (LLVM: %s), %u hardware threads; avx2 %d, avx512f %d, avx512bf16 %d\n", bench::cpu_model().c_str(),
              host.cpu.c_str(), std::thread::hardware_concurrency(), host.has("avx2"), host.has("avx512f"),
              host.has("avx512bf16"));
  std::printf("tessera target: %s; OpenBLAS core: %s; blocks %lld x %lld\n", pl::jit::cpu_target("native").str().c_str(),
              openblas_get_corename(), static_cast<long long>(bq), static_cast<long long>(bk));

  std::vector<bench::Report> reports;
  reports.reserve(seqs.size() * dims.size());
  for (int64_t seq : seqs)
    for (int64_t d : dims) {
      // About 2^25 (seq x seq) logits per call: 8 heads at 2048, 2 at 4096, 1 at 8192 (if fewer, 1).
      const int64_t heads = std::max<int64_t>(1, (int64_t{1} << 25) / (seq * seq));
      bench::Report& r = reports.emplace_back(
          fmt::format("attention forward, seq {}, head_dim {}, batch 1 x heads {}, blocks {}x{}", seq, d, heads, bq, bk));
      const pl::Shape shape{1, heads, seq, d};
      const pl::Array q = pl::Array::random_normal(shape, pl::f32, 1), k = pl::Array::random_normal(shape, pl::f32, 2),
                      v = pl::Array::random_normal(shape, pl::f32, 3);
      const pl::Array q16 = q.astype(pl::bf16), k16 = k.astype(pl::bf16), v16 = v.astype(pl::bf16);
      std::vector<float> o(static_cast<size_t>(heads * seq * d));
      PlainAttention plain(seq, d, backward);
      const pl::Array dout = pl::Array::random_normal(shape, pl::f32, 4), dout16 = dout.astype(pl::bf16);
      std::vector<float> dq(o.size()), dk(o.size()), dv(o.size());
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      for (bool causal : {false, true}) {
        const fa::FlashOptions opt{.causal = causal, .sm_scale = scale, .block_sizes = {.block_q = bq, .block_k = bk}};
        const double flops = 4.0 * heads * seq * seq * d;  // the full S and P v, as the reference computes
        if (only_tessera) {
          pl::set_num_threads(1);
          for (const pl::Array* x : {&q, &q16}) {
            const pl::Array& kk = x == &q ? k : k16;
            const pl::Array& vv = x == &q ? v : v16;
            r.add_rate(fmt::format("tessera flash {}, {}", pl::dtype_name(x->dtype()), causal ? "causal" : "non-causal"),
                       bench::measure([&] { fa::flash_attention(*x, kk, vv, opt); }, runs), flops, 1e-9, "GFLOP/s");
          }
          continue;
        }
        for (int threads : {1, 2}) {
          const std::string t = fmt::format("{}, {} thread{}", causal ? "causal" : "non-causal", threads,
                                            threads > 1 ? "s" : "");
          openblas_set_num_threads(threads);
          pl::set_num_threads(threads);
          const std::string base = "plain sgemm + softmax loop f32, " + t;
          r.add_rate(base, bench::measure([&] {
                       plain.forward(q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), o.data(), heads, scale,
                                     causal, threads);
                     }, runs),
                     flops, 1e-9, "GFLOP/s");
          r.add_rate("tessera flash f32, " + t, bench::measure([&] { fa::flash_attention(q, k, v, opt); }, runs), flops,
                     1e-9, "GFLOP/s", base);
          r.add_rate("tessera flash bf16, " + t, bench::measure([&] { fa::flash_attention(q16, k16, v16, opt); }, runs),
                     flops, 1e-9, "GFLOP/s", base);
          if (!backward) continue;
          // The backward: the reference's five seq x seq x head_dim matmuls (S again, dv, dP, dq, dk).
          const double bwd_flops = 10.0 * heads * seq * seq * d;
          const std::string bwd_base = "backward: plain sgemm + loops f32, " + t;
          r.add_rate(bwd_base, bench::measure([&] {
                       plain.backward(q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), o.data(),
                                      dout.data_as<float>(), dq.data(), dk.data(), dv.data(), heads, scale, causal, threads);
                     }, runs),
                     bwd_flops, 1e-9, "GFLOP/s");
          for (const pl::Array* x : {&q, &q16}) {
            const bool bf16 = x == &q16;
            const pl::Array &kk = bf16 ? k16 : k, &vv = bf16 ? v16 : v, &dd = bf16 ? dout16 : dout;
            const fa::Forward f = fa::flash_attention_with_lse(*x, kk, vv, opt);
            r.add_rate(fmt::format("backward: tessera flash {}, {}", pl::dtype_name(x->dtype()), t),
                       bench::measure([&] { fa::flash_attention_bwd(*x, kk, vv, f.o, f.lse, dd, opt); }, runs),
                       bwd_flops, 1e-9, "GFLOP/s", bwd_base);
          }
        }
      }
      r.note("GFLOP/s count 4 seq^2 head_dim per head (backward: 10) for every row, causal too (the reference's work)");
      r.note("the machine was shared with other builds while measuring: compare medians");
      pl::set_num_threads(0);
      r.print();
    }
  std::vector<const bench::Report*> all;
  for (const bench::Report& r : reports) all.push_back(&r);
  bench::write_json(argc, argv, all);
  return 0;
}
