// Paged attention for decoding (ops/attention/paged_attention) against the plain way, measured in
// the same run: per (sequence, kv head), gather the sequence's pages into contiguous k and v (memcpy
// per page), then S = q_group k^T with OpenBLAS sgemm, the softmax of S * scale in a plain C++ loop,
// and o = P v with sgemm; (sequence, kv head) pairs split over the threads. One query token per
// sequence, 32 query heads over 8 kv heads, head_dim 128, pages of 16 tokens, sequences of random
// lengths between half and all of their capacity; tessera f32 and bf16 (both against the f32
// reference), copies as TESSERA_DMA says (default: on the DMA worker when a core is idle) and
// eager, on 1 and 2 threads. Decoding reads every cached key and value once, so the figure is
// the cached (token, kv head) rows a call attends to per second, M rows/s: the same work for every
// row, so a ratio is a speed-up per call.
//
//   paged_attention [--json FILE] [--runs N] [--batch N] [--capacity 1024,4096] [--page-size N]
//                   [--pages-per-block N]
#include <tessera/attention.hpp>

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "benchmarks/bench_util.h"
#include "benchmarks/openblas.h"
#include "jit/llvm/target.h"

namespace pl = tessera;
namespace fa = tessera::attention;

namespace {

struct Problem {
  int64_t batch, heads, kv_heads, d, page_size, per_seq, total_pages;
  std::vector<int32_t> lengths, table;
};

// o for every sequence and head, the plain way (see the file comment).
class PlainPaged {
 public:
  explicit PlainPaged(const Problem& p) : p_(p) {}

  void run(const float* q, const float* k_pages, const float* v_pages, float* o, float scale, int threads) {
    const int64_t pairs = p_.batch * p_.kv_heads;
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { pairs_in(pairs * t / threads, pairs * (t + 1) / threads, q, k_pages, v_pages, o, scale); });
    pairs_in(0, pairs / threads, q, k_pages, v_pages, o, scale);
    for (std::thread& t : pool) t.join();
  }

 private:
  void pairs_in(int64_t lo, int64_t hi, const float* q, const float* k_pages, const float* v_pages, float* o,
                float scale) const {
    const int64_t group = p_.heads / p_.kv_heads, d = p_.d, cap = p_.per_seq * p_.page_size;
    std::vector<float> k(static_cast<size_t>(cap * d)), v(k.size()), s(static_cast<size_t>(group * cap));
    for (int64_t pair = lo; pair < hi; ++pair) {
      const int64_t b = pair / p_.kv_heads, g = pair % p_.kv_heads, n = p_.lengths[b];
      if (n == 0) continue;
      for (int64_t i = 0; i * p_.page_size < n; ++i) {
        const int64_t rows = std::min(p_.page_size, n - i * p_.page_size);
        const int64_t src = ((g * p_.total_pages + p_.table[b * p_.per_seq + i]) * p_.page_size) * d;
        std::memcpy(k.data() + i * p_.page_size * d, k_pages + src, sizeof(float) * rows * d);
        std::memcpy(v.data() + i * p_.page_size * d, v_pages + src, sizeof(float) * rows * d);
      }
      const float* qg = q + (b * p_.heads + g * group) * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(group), int(n), int(d), scale, qg, int(d), k.data(),
                  int(d), 0.0f, s.data(), int(n));
      for (int64_t r = 0; r < group; ++r) {
        float* row = s.data() + r * n;
        float mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < n; ++c) mx = std::max(mx, row[c]);
        for (int64_t c = 0; c < n; ++c) sum += row[c] = std::exp(row[c] - mx);
        for (int64_t c = 0; c < n; ++c) row[c] /= sum;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(group), int(d), int(n), 1.0f, s.data(), int(n),
                  v.data(), int(d), 0.0f, o + (b * p_.heads + g * group) * d, int(d));
    }
  }

  const Problem& p_;
};

}  // namespace

int main(int argc, char** argv) {
  bench::use_openblas_best_core(argv);
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "7").c_str());
  const int64_t batch = std::stoll(bench::arg(argc, argv, "--batch", "8"));
  const int64_t page_size = std::stoll(bench::arg(argc, argv, "--page-size", "16"));
  const std::optional<int64_t> per_block =
      bench::has_flag(argc, argv, "--pages-per-block")
          ? std::optional<int64_t>(std::stoll(bench::arg(argc, argv, "--pages-per-block")))
          : std::nullopt;
  std::vector<int64_t> capacities;
  std::stringstream list(bench::arg(argc, argv, "--capacity", "1024,4096"));
  for (std::string item; std::getline(list, item, ',');) capacities.push_back(std::stoll(item));

  const pl::jit::HostCpu& host = pl::jit::host_cpu();
  std::printf("CPU: %s (LLVM: %s), %u hardware threads; avx2 %d, avx512f %d, avx512bf16 %d\n", bench::cpu_model().c_str(),
              host.cpu.c_str(), std::thread::hardware_concurrency(), host.has("avx2"), host.has("avx512f"),
              host.has("avx512bf16"));
  std::printf("tessera target: %s; OpenBLAS core: %s\n", pl::jit::cpu_target("native").str().c_str(),
              openblas_get_corename());

  std::vector<bench::Report> reports;
  for (int64_t capacity : capacities) {
    Problem p{.batch = batch, .heads = 32, .kv_heads = 8, .d = 128, .page_size = page_size, .per_seq = capacity / page_size};
    p.total_pages = p.batch * p.per_seq;
    std::mt19937 rng(1);
    std::vector<int32_t> pool(static_cast<size_t>(p.total_pages));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    p.table = pool;  // each sequence owns per_seq shuffled pages of the pool
    int64_t tokens = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      p.lengths.push_back(static_cast<int32_t>(std::uniform_int_distribution<int64_t>(capacity / 2, capacity)(rng)));
      tokens += p.lengths.back();
    }
    bench::Report& r = reports.emplace_back(fmt::format(
        "paged attention decode, batch {}, heads {} over kv heads {}, head_dim {}, pages of {}, capacity {} ({} tokens)",
        p.batch, p.heads, p.kv_heads, p.d, p.page_size, capacity, tokens));
    const pl::Shape pages{p.kv_heads, p.total_pages, p.page_size, p.d};
    const pl::Array q = pl::Array::random_normal({p.batch, p.heads, p.d}, pl::f32, 1);
    const pl::Array k = pl::Array::random_normal(pages, pl::f32, 2), v = pl::Array::random_normal(pages, pl::f32, 3);
    const pl::Array q16 = q.astype(pl::bf16), k16 = k.astype(pl::bf16), v16 = v.astype(pl::bf16);
    const pl::Array lengths = pl::Array::from_vector(p.lengths, {p.batch});
    const pl::Array table = pl::Array::from_vector(p.table, {p.batch, p.per_seq});
    const float scale = 1.0f / std::sqrt(static_cast<float>(p.d));
    const fa::PagedOptions opt{.sm_scale = scale, .pages_per_compute_block = per_block};
    std::vector<float> o(static_cast<size_t>(p.batch * p.heads * p.d));
    PlainPaged plain(p);
    const double rows = static_cast<double>(tokens) * p.kv_heads;
    for (int threads : {1, 2}) {
      const std::string t = fmt::format("{} thread{}", threads, threads > 1 ? "s" : "");
      openblas_set_num_threads(1);  // the pairs are split over the threads, as tessera's grid is
      pl::set_num_threads(threads);
      const std::string base = "plain gather + sgemm + softmax f32, " + t;
      r.add_rate(base, bench::measure([&] {
                   plain.run(q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), o.data(), scale, threads);
                 }, runs),
                 rows, 1e-6, "Mrow/s");
      // f32 and bf16 with the copies as TESSERA_DMA says, then with every copy done at once by the
      // kernel's thread instead of by the DMA worker (which takes them when a core is idle): a page
      // is a small copy, and handing each to the worker and waiting for it can cost more than the
      // overlap gains.
      for (const char* copies : {"", "eager copies, "}) {
        if (*copies) pl::set_dma_execution(pl::DmaExecution::eager);
        for (const pl::Array* x : {&q, &q16}) {
          const bool bf16 = x == &q16;
          r.add_rate(fmt::format("tessera paged {}, {}{}", bf16 ? "bf16" : "f32", copies, t),
                     bench::measure([&] { fa::paged_attention(*x, bf16 ? k16 : k, bf16 ? v16 : v, lengths, table, opt); },
                                    runs),
                     rows, 1e-6, "Mrow/s", base);
        }
      }
      pl::set_dma_execution(pl::DmaExecution::automatic);
    }
    r.note("Mrow/s: (token, kv head) rows of k and v attended to per second; each row is head_dim values of k and of v");
    r.note("the machine was shared with other builds while measuring: compare medians");
    pl::set_num_threads(0);
    r.print();
  }
  bench::write_reports_json(argc, argv, reports);
  return 0;
}
