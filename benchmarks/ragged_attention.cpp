// Ragged attention (ops/attention/ragged_attention) against a plain reference and against flash
// attention with segment ids on the same packed batch, measured in the same run. The reference runs
// each (sequence, head) on its own: S = q k^T with OpenBLAS sgemm straight from the packed arrays,
// the softmax of S * scale in a plain C++ loop (causal: keys after the query masked), o = P v with
// sgemm; the pairs split over the threads. Flash attention visits every (q block, kv block) pair and
// masks, while ragged attention visits only the kv blocks of each q block's sequences. A batch of
// `--seqs` sequences of random lengths (a quarter to twice the mean) packed into `--tokens` tokens,
// 8 heads, head_dim 64, blocks of 128, causal and not, f32, on 1 and 2 threads. The figure is the
// (q, k) pairs the sequences hold (causal: about half) per second, the same work for all, so a
// ratio is a speed-up; the reference's output is also compared with ragged attention's.
//
//   ragged_attention [--json FILE] [--runs N] [--tokens N] [--seqs N]
#include <tessera/attention.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "jit/llvm/target.h"

namespace pl = tessera;
namespace fa = tessera::attention;

namespace {

// [tokens, heads, d] -> [1, heads, tokens, d], flash attention's layout.
pl::Array heads_first(const pl::Array& x) {
  const int64_t t = x.shape()[0], h = x.shape()[1], d = x.shape()[2];
  const std::vector<float> in = x.to_vector<float>();
  std::vector<float> out(in.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t c = 0; c < d; ++c) out[(j * t + i) * d + c] = in[(i * h + j) * d + c];
  return pl::Array::from_vector(out, {1, h, t, d});
}

// The plain reference: every (sequence, head) pair on its own, [tokens, heads, d] read in place
// (a head's rows of a sequence are heads * d floats apart).
void plain_ragged(const float* q, const float* k, const float* v, float* o, const std::vector<int32_t>& cu,
                  int64_t heads, int64_t d, float scale, bool causal, int threads) {
  const int64_t seqs = static_cast<int64_t>(cu.size()) - 1, pairs = seqs * heads, ld = heads * d;
  auto pairs_in = [&](int64_t lo, int64_t hi) {
    std::vector<float> s;
    for (int64_t pair = lo; pair < hi; ++pair) {
      const int64_t seq = pair / heads, h = pair % heads, first = cu[seq], n = cu[seq + 1] - first;
      if (n == 0) continue;
      s.resize(static_cast<size_t>(n * n));
      const int64_t at = (first * heads + h) * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(d), scale, q + at, int(ld), k + at,
                  int(ld), 0.0f, s.data(), int(n));
      for (int64_t r = 0; r < n; ++r) {
        float* row = s.data() + r * n;
        const int64_t keys = causal ? r + 1 : n;
        float mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < keys; ++c) mx = std::max(mx, row[c]);
        for (int64_t c = 0; c < keys; ++c) sum += row[c] = std::exp(row[c] - mx);
        for (int64_t c = 0; c < keys; ++c) row[c] /= sum;
        for (int64_t c = keys; c < n; ++c) row[c] = 0;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(d), int(n), 1.0f, s.data(), int(n), v + at,
                  int(ld), 0.0f, o + at, int(ld));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { pairs_in(pairs * t / threads, pairs * (t + 1) / threads); });
  pairs_in(0, pairs / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "5").c_str());
  const int64_t tokens = std::stoll(bench::arg(argc, argv, "--tokens", "4096"));
  const int64_t seqs = std::stoll(bench::arg(argc, argv, "--seqs", "16"));
  const int64_t heads = 8, d = 64;
  const pl::jit::HostCpu& host = pl::jit::host_cpu();
  std::printf("CPU: %s (LLVM: %s), %u hardware threads; tessera target: %s; OpenBLAS core: %s\n",
              bench::cpu_model().c_str(), host.cpu.c_str(), std::thread::hardware_concurrency(),
              pl::jit::cpu_target("native").str().c_str(), openblas_get_corename());

  // Random lengths summing to `tokens`: draw, scale, give the rounding's rest to the last.
  std::mt19937 rng(1);
  std::vector<double> draw;
  double total = 0;
  for (int64_t s = 0; s < seqs; ++s) total += draw.emplace_back(std::uniform_real_distribution<double>(0.25, 2.0)(rng));
  std::vector<int32_t> cu{0}, ids;
  for (int64_t s = 0; s < seqs; ++s) {
    const auto n = s + 1 == seqs ? static_cast<int32_t>(tokens - cu.back())
                                 : static_cast<int32_t>(draw[s] / total * static_cast<double>(tokens));
    cu.push_back(cu.back() + n);
    ids.insert(ids.end(), static_cast<size_t>(n), static_cast<int32_t>(s));
  }
  const pl::Array cu_arr = pl::Array::from_vector(cu, {seqs + 1});
  const pl::Array seg = pl::Array::from_vector(ids, {1, tokens});
  const pl::Array q = pl::Array::random_normal({tokens, heads, d}, pl::f32, 1),
                  k = pl::Array::random_normal({tokens, heads, d}, pl::f32, 2),
                  v = pl::Array::random_normal({tokens, heads, d}, pl::f32, 3);
  const pl::Array q4 = heads_first(q), k4 = heads_first(k), v4 = heads_first(v);

  bench::Report r(fmt::format("ragged attention, {} sequences in {} tokens, heads {}, head_dim {}, blocks 128", seqs,
                              tokens, heads, d));
  for (bool causal : {false, true}) {
    double pairs = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      const double n = cu[s + 1] - cu[s];
      pairs += causal ? n * (n + 1) / 2 : n * n;
    }
    pairs *= heads;
    const double scale = 0.125;
    for (int threads : {1, 2}) {
      openblas_set_num_threads(1);  // the pairs are split over the threads, as tessera's grid is
      pl::set_num_threads(threads);
      const std::string t = fmt::format("{}, {} thread{}", causal ? "causal" : "non-causal", threads, threads > 1 ? "s" : "");
      const std::string base = "plain sgemm + softmax per sequence f32, " + t;
      std::vector<float> plain(static_cast<size_t>(tokens * heads * d));
      r.add_rate(base, bench::measure([&] {
                   plain_ragged(q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), plain.data(), cu, heads, d,
                                static_cast<float>(scale), causal, threads);
                 }, runs),
                 pairs, 1e-6, "Mpair/s");
      bench::settle();  // OpenBLAS's workers stop spinning before tessera's rows
      r.add_rate("flash attention with segment ids, " + t, bench::measure([&] {
                   fa::flash_attention(q4, k4, v4, {.causal = causal, .sm_scale = scale, .segment_ids = fa::SegmentIds{seg, seg}});
                 }, runs),
                 pairs, 1e-6, "Mpair/s", base);
      pl::Array out;
      r.add_rate("ragged attention, " + t, bench::measure([&] {
                   out = fa::ragged_attention(q, k, v, cu_arr, {.causal = causal, .sm_scale = scale});
                 }, runs),
                 pairs, 1e-6, "Mpair/s", base);
      double worst = 0;
      const std::vector<float> got = out.to_vector<float>();
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(got[i] - plain[i])));
      if (threads == 1) r.note(fmt::format("{}: ragged attention within {:.2g} of the reference", causal ? "causal" : "non-causal", worst));
    }
  }
  r.note("Mpair/s: (query, key) pairs within a sequence per second (causal: key <= query), per head");
  r.note("the machine was shared with other builds while measuring: compare medians");
  pl::set_num_threads(0);
  r.print();
  bench::write_json(argc, argv, {&r});
  return 0;
}
