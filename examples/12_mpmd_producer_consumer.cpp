// Example 12: two kinds of cores, two kernels, one mpmd_map: producers hand blocks to a consumer.
//
// A projection followed by an RMS norm, split the way a chip with two kinds of cores would split it:
// two "matmul" cores each compute row blocks of h = x @ w (every other block) and hand them through
// shared HBM slots to one "vector" core, which normalises every row of h and writes the output. The
// two kernels run at once, over their own meshes (pl::CoreMesh), and synchronise only through
// semaphores they share:
//   full[s]   the producer signals it when slot s holds a block;
//   empty[s]  the consumer signals it when it has taken the block, so the producer may refill it.
// Each producer has two slots, so it computes its next block while the consumer works on the last
// one. VMEM scratch is every core's own; the HBM slots and the semaphores are shared.
//
// The result is checked against the host, compiled and interpreted (also with the interpreter's
// on_wait copies, which land as late as they may), with a numerics report; the compiled run is
// benchmarked and its timeline (a track per core: copies, semaphore waits, the kernels' "matmul"
// and "norm" scopes) is written to mpmd_timeline.json.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdio>

#include "examples/example_util.h"

namespace pl = tessera;

constexpr int64_t kBlock = 32;  // rows per handed-over block
constexpr int64_t kProducers = 2, kSlotsEach = 2;

struct Shapes {
  int64_t m, k, n;
  int64_t blocks() const { return m / kBlock; }
};

// Producer p computes blocks p, p + 2, p + 4, ...: its t-th block goes to slot p * 2 + t % 2.
auto make_producer(Shapes s) {
  return [s](pl::Ref x, pl::Ref w, pl::Ref, pl::Ref slots, pl::Ref full, pl::Ref empty, pl::Ref x_vmem,
             pl::Ref w_vmem, pl::Ref h_vmem) {
    const pl::Value p = pl::axis_index("matmul");
    pl::sync_copy(w, w_vmem);  // the weights, once
    const int64_t rounds = (s.blocks() + kProducers - 1) / kProducers;
    pl::loop(0, rounds, [&](pl::Value t) {
      const pl::Value b = t * kProducers + p;
      pl::when(b < s.blocks(), [&] {
        const pl::Value slot = p * kSlotsEach + t % kSlotsEach;
        pl::sync_copy(x.at(pl::ds(b * kBlock, kBlock)), x_vmem);
        pl::named_scope("matmul", [&] { h_vmem() = pl::dot(x_vmem(), w_vmem()); });
        // The slot's previous block must have been taken before it is overwritten.
        pl::when(t >= kSlotsEach, [&] { pl::semaphore_wait(empty.at(slot)); });
        pl::sync_copy(h_vmem, slots.at(slot));
        pl::semaphore_signal(full.at(slot));
      });
    });
  };
}

// The consumer takes the blocks in order and writes rms_norm(h) = h / sqrt(mean(h^2) + eps).
auto make_consumer(Shapes s) {
  return [s](pl::Ref, pl::Ref, pl::Ref out, pl::Ref slots, pl::Ref full, pl::Ref empty, pl::Ref, pl::Ref,
             pl::Ref h_vmem) {
    pl::loop(0, s.blocks(), [&](pl::Value b) {
      const pl::Value p = b % kProducers, t = b / kProducers;
      const pl::Value slot = p * kSlotsEach + t % kSlotsEach;
      pl::semaphore_wait(full.at(slot));
      pl::sync_copy(slots.at(slot), h_vmem);
      // Free the slot only if its producer fills it again, so that every semaphore ends at zero.
      const pl::Value producer_blocks = (s.blocks() - p + kProducers - 1) / kProducers;
      pl::when(t + kSlotsEach < producer_blocks, [&] { pl::semaphore_signal(empty.at(slot)); });
      pl::named_scope("norm", [&] {
        const pl::Value h = h_vmem();
        const pl::Value mean_square = pl::sum(h * h, {1}) / static_cast<float>(s.n);
        h_vmem() = h * pl::broadcast_to(pl::reshape(pl::rsqrt(mean_square + 1e-6f), {kBlock, 1}), {kBlock, s.n});
      });
      pl::sync_copy(h_vmem, out.at(pl::ds(b * kBlock, kBlock)));
    });
  };
}

pl::MpmdCall<pl::Array> projection_norm(Shapes s, const pl::CallOptions& options) {
  pl::CallOptions o = options;
  o.name = "projection_norm";
  return pl::mpmd_map(
      {{pl::CoreMesh("matmul", kProducers), make_producer(s)}, {pl::CoreMesh("vector", 1), make_consumer(s)}},
      pl::ShapeDtype({s.m, s.n}, pl::f32),
      {pl::HBM({kProducers * kSlotsEach, kBlock, s.n}, pl::f32),  // slots
       pl::SemaphoreType::REGULAR({kProducers * kSlotsEach}),     // full
       pl::SemaphoreType::REGULAR({kProducers * kSlotsEach}),     // empty
       pl::VMEM({kBlock, s.k}, pl::f32), pl::VMEM({s.k, s.n}, pl::f32), pl::VMEM({kBlock, s.n}, pl::f32)},
      o);
}

pl::Array host_projection_norm(const pl::Array& x, const pl::Array& w) {
  pl::Array h = examples::host_matmul(x, w, pl::f32);
  auto [m, n] = h.shape2();
  std::vector<double> v = h.to_vector<double>();
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += v[i * n + j] * v[i * n + j];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
    for (int64_t j = 0; j < n; ++j) v[i * n + j] *= scale;
  }
  return pl::Array::from_vector(v, {m, n}, pl::f32);
}

int main() {
  const Shapes s{.m = 512, .k = 256, .n = 128};  // 16 blocks: 8 per producer
  const pl::Array x = pl::Array::random_normal({s.m, s.k}, pl::f32, 1);
  const pl::Array w = pl::Array::random_normal({s.k, s.n}, pl::f32, 2);
  const pl::Array want = host_projection_norm(x, w);
  std::printf("x (%lld, %lld) @ w (%lld, %lld), then an RMS norm per row; %lld blocks of %lld rows from %lld "
              "producer cores to 1 consumer core\n",
              static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.k),
              static_cast<long long>(s.n), static_cast<long long>(s.blocks()), static_cast<long long>(kBlock),
              static_cast<long long>(kProducers));

  int status = examples::run_in_every_backend("projection_norm", [&](const pl::CallOptions& options) {
    auto call = projection_norm(s, options);
    const pl::Array out = call(x, w);
    const pl::numerics::NumericsResult r = pl::numerics::compare(want, out, {.atol = 1e-4, .rtol = 1e-4, .region_grid = {4, 1}});
    if (!options.interpret) {
      const pl::BenchmarkResult b = pl::benchmark(call, x, w);
      std::printf("  %.2f GFLOP/s at the median\n", 2.0 * static_cast<double>(s.m * s.k * s.n) / b.median * 1e-6);
      pl::profile("mpmd_timeline.json", [&] { return call(x, w); });
      std::printf("  timeline of one call written to mpmd_timeline.json (open it in https://ui.perfetto.dev)\n");
    }
    return examples::Outcome{r.passed, out};
  }, 1e-5, 1e-5);

  // The interpreter again, with copies that land only when waited for (or when their core blocks):
  // a read of a slot before its semaphore said so would show stale data here.
  status |= examples::run_in_every_backend("projection_norm, on_wait copies", [&](const pl::CallOptions& options) {
    pl::CallOptions o = options;
    if (o.interpret) o.interpret->dma_execution_mode = pl::DmaExecutionMode::on_wait;
    const pl::Array out = projection_norm(s, o)(x, w);
    const bool ok = examples::check("out == rms_norm(x @ w)", out, want, 1e-4, 1e-4);
    return examples::Outcome{ok, out};
  }, 1e-5, 1e-5);
  return status;
}
