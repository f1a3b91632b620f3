// A remote copy and its signal between two processes (the MPI transport, docs/design.md §4c), from
// 8 B to 16 MiB, against raw MPI (MPI_Put + flush + MPI_Accumulate on a semaphore word + flush, what
// the transport does at least) and memcpy, measured in the same run; and the same kernel with both
// devices as threads of one process. Then the latency of a round trip (a copy there, one back), and
// example 9's collective matmul on a ring of 2 devices, one per process, against the same ring as
// threads of one process. Run it under mpiexec with two processes (process 0 prints):
//
//   mpiexec -n 2 --bind-to none bench_mpi_put [--json results.json] [--runs N]
//
// Tessera's figure per copy is (time of a shard_map whose kernel makes `reps` copies - the time of
// one whose kernel makes none, run right before or after it) / reps: launch and shard_map overheads
// cancel, what is left is the copy, its signal, the receiver's delivery and its wait. Bandwidth is
// bytes / that time. Each round runs the raw loop and then such a pair of calls, so the two take
// turns on the machine; the figures are medians over the rounds (--runs, 15 by default), and a note
// per size gives the median of the rounds' own ratios. The sender's side is what the transport itself
// timed per copy (rt::mpi::copy_paths: from the copy's start until its data landed and its signal
// left), the same span the raw loop times; a note per size says how the copies travelled (shared
// memory, dynamic window, mailbox). Two processes on a 2-core machine share it with each other's
// waiting threads: expect wide spreads, read the medians.
#include <mpi.h>
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

#include "benchmarks/bench_util.h"
#include "examples/collective_matmul.h"
#include "runtime/mpi_transport.h"
#include "runtime/transport.h"

namespace pl = tessera;

namespace {

int64_t copies(const tessera::rt::mpi::CopyPaths& p) { return p.shared_memory + p.window + p.mailbox; }

// Device 0 copies its block to device 1 `reps` times (waiting for each to leave), device 1 waits for
// every one to arrive.
pl::ShardedArray ping(const pl::Array& x, int64_t reps) {
  const pl::Mesh mesh({2}, {"x"});
  auto kernel = [reps](pl::Ref in, pl::Ref out, pl::Ref send, pl::Ref recv) {
    pl::Value me = pl::axis_index("x");
    auto copy = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", 1}}));
    pl::loop(0, reps, [&](pl::Value) {
      pl::when(me == 0, [&] {
        copy.start();
        copy.wait_send();
      });
      pl::when(me == 1, [&] { copy.wait_recv(); });
    });
  };
  auto f = [&](const pl::Array& block) {
    return pl::pallas_call(kernel,
                           pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                        .out_specs = {pl::BlockSpec(pl::ANY)},
                                        .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
                           pl::ShapeDtype(block.shape(), block.dtype()))(block);
  };
  return pl::shard_map(f, mesh, {pl::P("x")}, {pl::P("x")})(x);
}

// Device 0 sends its block to device 1, which sends it back, `reps` times: a round trip each.
pl::ShardedArray ping_pong(const pl::Array& x, int64_t reps) {
  const pl::Mesh mesh({2}, {"x"});
  auto kernel = [reps](pl::Ref in, pl::Ref out, pl::Ref send, pl::Ref recv, pl::Ref send_back, pl::Ref recv_back) {
    pl::Value me = pl::axis_index("x");
    auto there = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", 1}}));
    auto back = pl::make_async_remote_copy(out, out, send_back, recv_back, pl::DeviceId({{"x", 0}}));
    pl::loop(0, reps, [&](pl::Value) {
      pl::when(me == 0, [&] {
        there.start();
        there.wait_send();
        back.wait_recv();
      });
      pl::when(me == 1, [&] {
        there.wait_recv();
        back.start();
        back.wait_send();
      });
    });
  };
  auto f = [&](const pl::Array& block) {
    return pl::pallas_call(kernel,
                           pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                        .out_specs = {pl::BlockSpec(pl::ANY)},
                                        .scratch_shapes = {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA,
                                                           pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}},
                           pl::ShapeDtype(block.shape(), block.dtype()))(block);
  };
  return pl::shard_map(f, mesh, {pl::P("x")}, {pl::P("x")})(x);
}

// A barrier whose waiters sleep between polls: process 1 waits in it while process 0 times its raw
// puts, and Open MPI's own barrier would spin on a core the puts need (two processes, two cores).
void sleeping_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Runs `run` with every device a thread of this process (each process measures it alone, at the
// same time as the other), then goes back to the processes.
template <class F>
auto on_threads(F run) {
  tessera::rt::Transport* processes = &tessera::rt::process_transport();
  tessera::rt::set_process_transport(nullptr);
  auto result = run();
  tessera::rt::set_process_transport(processes);
  MPI_Barrier(MPI_COMM_WORLD);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::atoi(bench::arg(argc, argv, "--runs", "15").c_str());
  pl::distributed::initialize({.window_bytes = int64_t{1} << 30});
  const int rank = pl::process_index();
  if (pl::process_count() != 2) {
    if (rank == 0) std::fprintf(stderr, "bench_mpi_put: run it with two processes (mpiexec -n 2)\n");
    return 2;
  }
  // The raw baseline's own window: one block and a semaphore word on each process.
  const int64_t largest = int64_t{16} << 20;
  void* base = nullptr;
  MPI_Win win;
  MPI_Win_allocate(largest + 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  const int64_t src_word[1] = {42};

  bench::Report report("a remote copy + signal between 2 processes (MPI transport)");
  for (int64_t bytes : {int64_t{8}, int64_t{1} << 10, int64_t{64} << 10, int64_t{1} << 20, int64_t{4} << 20, largest}) {
    // Copies per kernel: 256 MiB in all from 64 KiB up, so that a shard_map call's own noise (its
    // barriers take milliseconds on a busy machine) is small beside the copies of one call.
    const int64_t reps = bytes >= (int64_t{64} << 10) ? std::max<int64_t>(16, (int64_t{256} << 20) / bytes) : 256;
    const pl::Array x = pl::Array::zeros({2, bytes / 4}, pl::f32);  // each device's block: `bytes`
    std::vector<std::byte> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
    const std::string size = bytes >= (1 << 20) ? fmt::format("{} MiB", bytes >> 20)
                             : bytes >= 1024    ? fmt::format("{} KiB", bytes >> 10)
                                                : fmt::format("{} B", bytes);
    // Every process takes part in every measurement (shard_maps and the raw puts are collective), in
    // the same order. A whole-call figure is one pair of calls: (a call whose kernel makes `reps`
    // copies - the call just before or after it whose kernel makes none) / reps, the two in
    // alternating order, so that launch and shard_map overheads cancel and a slow stretch of the
    // machine hits both calls of a pair rather than one side of the subtraction.
    auto paired = [&](const std::function<void(int64_t)>& run, int round) {
      const double t0 = bench::now();
      run(round % 2 ? reps : 0);
      const double t1 = bench::now();
      run(round % 2 ? 0 : reps);
      const double t2 = bench::now();
      const double empty = round % 2 ? t2 - t1 : t1 - t0, full = round % 2 ? t1 - t0 : t2 - t1;
      return std::max(0.0, full - empty) / static_cast<double>(reps);
    };
    // A per-copy row, unless the copies drowned in the launches' noise (a zero time has no ratio).
    auto add_per_copy = [&](const std::string& name, const bench::Stats& s, const std::string& baseline) {
      if (s.median() > 0) report.add_time(name, s, "us", baseline);
      else report.note(name + ": below the noise of an empty launch in this run");
      if (s.median() > 0 && bytes >= (int64_t{64} << 10))
        report.add_rate(name + ", bandwidth", s, static_cast<double>(bytes), 1e-9, "GB/s", baseline + ", bandwidth");
    };
    const std::string raw = "raw MPI_Put + flush + MPI_Accumulate + flush, " + size;
    // The sender's loop alone: the barriers around it, under Open MPI's yielding progress on a busy
    // machine, take milliseconds whatever the size, which would swamp the puts.
    auto raw_round = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      double seconds = 0;
      if (rank == 0) {
        const double t0 = bench::now();
        for (int64_t r = 0; r < reps; ++r) {
          MPI_Put(src.data(), static_cast<int>(bytes), MPI_BYTE, 1, 64, static_cast<int>(bytes), MPI_BYTE, win);
          MPI_Win_flush(1, win);
          const int64_t add = bytes;
          MPI_Accumulate(&add, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, MPI_SUM, win);
          MPI_Win_flush(1, win);
        }
        seconds = (bench::now() - t0) / static_cast<double>(reps);
      }
      sleeping_barrier();
      return seconds;
    };
    // The raw loop and tessera's pair of calls take turns, round by round, so both see the same
    // machine; besides the ratio of their medians, the median of the rounds' own ratios (raw / tessera).
    bench::Stats raw_stats, whole, sender;
    std::vector<double> round_ratios;
    const tessera::rt::mpi::CopyPaths before = tessera::rt::mpi::copy_paths();
    for (int round = 0; round <= runs; ++round) {  // round 0 warms up
      const double r = raw_round();
      const tessera::rt::mpi::CopyPaths b = tessera::rt::mpi::copy_paths();
      const double t = paired([&](int64_t n) { ping(x, n); }, round);
      const tessera::rt::mpi::CopyPaths a = tessera::rt::mpi::copy_paths();
      if (round == 0) continue;
      raw_stats.seconds.push_back(r);
      whole.seconds.push_back(t);
      if (const int64_t c = copies(a) - copies(b); c > 0) sender.seconds.push_back((a.seconds - b.seconds) / static_cast<double>(c));
      round_ratios.push_back(t > 0 ? r / t : std::numeric_limits<double>::infinity());
    }
    const tessera::rt::mpi::CopyPaths after = tessera::rt::mpi::copy_paths();
    report.add_time(raw, raw_stats, "us");
    if (bytes >= (int64_t{64} << 10))
      report.add_rate(raw + ", bandwidth", raw_stats, static_cast<double>(bytes), 1e-9, "GB/s");
    report.add_time("memcpy, " + size,
                    bench::measure([&] { std::memcpy(dst.data(), src.data(), src.size()); }, runs, 1,
                                   bytes < (1 << 16) ? 256 : 4),
                    "us", raw);
    add_per_copy("tessera across processes, " + size, whole, raw);
    if (rank == 0) {
      // The sender's side of each shard_map's copies, as the transport timed it: what the raw loop times.
      const std::string name = "tessera across processes, the sender's side (copy + signal), " + size;
      report.add_time(name, sender, "us", raw);
      if (bytes >= (int64_t{64} << 10))
        report.add_rate(name + ", bandwidth", sender, static_cast<double>(bytes), 1e-9, "GB/s", raw + ", bandwidth");
      bench::Stats ratios{round_ratios};
      if (std::isfinite(ratios.median()))
        report.note(fmt::format("{}: whole call against raw, the median of {} rounds' own ratios (raw / tessera): {:.2f}x",
                                size, round_ratios.size(), ratios.median()));
      report.note(fmt::format("{}: copies by shared memory {}, by the dynamic window {}, by the mailbox {}", size,
                              after.shared_memory - before.shared_memory, after.window - before.window,
                              after.mailbox - before.mailbox));
    }
    // Both devices as threads of this process (each process measures it alone, at the same time).
    add_per_copy("tessera, both devices threads of one process, " + size, on_threads([&] {
                   bench::Stats s;
                   for (int round = 0; round <= runs; ++round)
                     if (const double t = paired([&](int64_t n) { ping(x, n); }, round); round > 0) s.seconds.push_back(t);
                   return s;
                 }),
                 raw);
  }

  // Latency: round trips of 8 B, raw (a put, its flag, the other side spinning on it) and tessera's
  // (the receiver woken from its wait).
  {
    const int64_t trips = 64;
    auto* flag = static_cast<volatile int64_t*>(base);
    *flag = 0;  // the semaphore word of the copies above
    MPI_Win_sync(win);
    MPI_Barrier(MPI_COMM_WORLD);
    bench::Stats raw_trip = bench::measure(
        [&] {
          MPI_Barrier(MPI_COMM_WORLD);
          const int other = 1 - rank;
          for (int64_t t = 1; t <= trips; ++t) {
            auto pass = [&] {
              MPI_Put(src_word, 8, MPI_BYTE, other, 64, 8, MPI_BYTE, win);
              MPI_Win_flush(other, win);
              MPI_Accumulate(&t, 1, MPI_INT64_T, other, 0, 1, MPI_INT64_T, MPI_REPLACE, win);
              MPI_Win_flush(other, win);
            };
            auto await = [&] {
              while (*flag < t) MPI_Win_sync(win);
            };
            if (rank == 0) pass(), await();
            else await(), pass();
          }
          MPI_Barrier(MPI_COMM_WORLD);
          *flag = 0;
          MPI_Win_sync(win);
          MPI_Barrier(MPI_COMM_WORLD);
        },
        runs);
    for (double& t : raw_trip.seconds) t /= static_cast<double>(trips);
    const std::string raw = "raw round trip of 8 B (put, flag, spin)";
    report.add_time(raw, raw_trip, "us");
    const pl::Array x = pl::Array::zeros({2, 2}, pl::f32);
    bench::Stats empty = bench::measure([&] { ping_pong(x, 0); }, runs);
    bench::Stats full = bench::measure([&] { ping_pong(x, trips); }, runs);
    for (double& t : full.seconds) t = std::max(0.0, t - empty.min()) / static_cast<double>(trips);
    report.add_time("tessera round trip of 8 B across processes", full, "us", raw);
  }

  // Example 9's collective matmul (bf16 shards of 256 x 256, buffering 2) on a ring of 2 devices.
  {
    const int64_t n = 256, ring = 2;
    const pl::Mesh mesh({1, ring}, {"ring", "i"});
    const pl::Array lhs = pl::Array::random_normal({n, ring * n}, pl::bf16, 1);
    const pl::Array rhs = pl::Array::random_normal({ring * n, ring * n}, pl::bf16, 2);
    std::vector<int32_t> ids(ring);
    std::iota(ids.begin(), ids.end(), 0);
    const pl::Array rings = pl::Array::from_vector(ids, {1, ring}), positions = pl::Array::from_vector(ids, {ring});
    auto matmul = [&] {
      pl::shard_map(
          [&](const pl::Array& l, const pl::Array& r) {
            return seed::collective_matmul(l, r, ring, 2, rings, positions, pl::CallOptions{});
          },
          mesh, {pl::P("ring", "i"), pl::P(pl::None, "i")}, {pl::P("ring", "i")})(lhs, rhs);
    };
    const std::string threads = "collective matmul (example 9), ring of 2 as threads of one process";
    report.add_time(threads, on_threads([&] { return bench::measure(matmul, runs); }), "ms");
    report.add_time("collective matmul (example 9), ring of 2 over 2 processes", bench::measure(matmul, runs), "ms",
                    threads);
  }
  report.note("times are per copy (us); ratios read baseline time / this time");
  report.note("tessera's per-copy time: (a shard_map whose kernel makes the copies - the one next to it whose kernel "
              "makes none) / copies; the round trip subtracts the fastest empty call");
  report.note("processes: 2 on one host (shared memory); the machine was shared while measuring");
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  if (rank == 0) {
    report.print();
    bench::write_json(argc, argv, {&report});
  }
  return 0;
}
