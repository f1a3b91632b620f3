// The MPI transport's shared-memory segment (docs/design.md §4c): while a shard_map over processes
// runs, kernel buffers come from it, and a copy of 16 KiB or more toward a process of the same host is
// a memcpy into its part (CopyPaths::shared_memory). Part of mpi_tests; every process runs every case.
#include <doctest/doctest.h>

#include <cstring>

#include "runtime/mpi_transport.h"
#include "runtime/transport.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

pl::Array halves(pl::Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i % 4000) - 7.0f;
  return pl::Array::from_vector(v, shape);
}

int64_t copies(const rt::mpi::CopyPaths& p) { return p.shared_memory + p.window + p.mailbox; }

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("pl::distributed::initialize: shared_bytes out of range is a UserError") {
    CHECK_THROWS_WITH_AS(pl::distributed::initialize({.shared_bytes = 4096}),
                         Contains("shared_bytes is out of range\n  given: shared_bytes = 4096"), UserError);
    CHECK_THROWS_WITH_AS(pl::distributed::initialize({.shared_bytes = -1}),
                         Contains("shared_bytes is out of range\n  given: shared_bytes = -1"), UserError);
  }

  TEST_CASE("copies toward a process of this host are memcpys into its segment, past Open MPI's 64 attachments") {
    // 24 devices, each with 12 buffers of 16 KiB (its block, its output, 10 scratch buffers): 72 to
    // 144 exposed per process, more than the dynamic window attaches (osc_rdma_max_attach, 64). Device
    // d copies its block into every scratch buffer of device d + 12, which always runs in another
    // process; the output is their sum.
    constexpr int64_t n = 24, rows = 64, cols = 64;
    const pl::Mesh mesh({n}, {"i"});
    auto kernel = [](pl::Ref in, pl::Ref out, pl::Ref s0, pl::Ref s1, pl::Ref s2, pl::Ref s3, pl::Ref s4, pl::Ref s5,
                     pl::Ref s6, pl::Ref s7, pl::Ref s8, pl::Ref s9, pl::Ref send, pl::Ref recv) {
      const pl::Ref scratch[] = {s0, s1, s2, s3, s4, s5, s6, s7, s8, s9};
      pl::Value partner = (pl::axis_index("i") + n / 2) % n;
      std::vector<pl::RemoteCopyDescriptor> sent;
      for (const pl::Ref& s : scratch) sent.push_back(pl::make_async_remote_copy(in, s, send, recv, pl::DeviceId({partner})));
      for (const pl::RemoteCopyDescriptor& c : sent) c.start();
      for (const pl::RemoteCopyDescriptor& c : sent) c.wait();
      pl::Value sum = s0();
      for (size_t k = 1; k < 10; ++k) sum = sum + scratch[k]();
      out() = sum;
    };
    std::vector<pl::ScratchShape> scratch(10, pl::VMEM({rows, cols}, pl::f32));
    scratch.push_back(pl::SemaphoreType::DMA);
    scratch.push_back(pl::SemaphoreType::DMA);
    const pl::Array x = halves({n * rows, cols});
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const auto call = pl::pallas_call(kernel,
                                        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::VMEM)},
                                                     .out_specs = {pl::BlockSpec(pl::VMEM)},
                                                     .scratch_shapes = scratch},
                                        pl::ShapeDtype({rows, cols}, pl::f32), backend);
      const rt::mpi::CopyPaths before = rt::mpi::copy_paths();
      const pl::Array y(pl::shard_map([&](const pl::Array& b) { return call(b); }, mesh, {pl::P("i")}, {pl::P("i")})(x));
      const rt::mpi::CopyPaths after = rt::mpi::copy_paths();
      // Every device's output is ten times its partner's block (exact: halves times ten).
      const std::vector<float> got = y.to_vector<float>(), in = x.to_vector<float>();
      bool all = true;
      for (int64_t d = 0; d < n && all; ++d)
        for (int64_t e = 0; e < rows * cols && all; ++e)
          all = got[static_cast<size_t>(d * rows * cols + e)] == 10 * in[static_cast<size_t>(((d + n / 2) % n) * rows * cols + e)];
      CHECK(all);
      const auto [lo, hi] = rt::process_devices(n, pl::process_index(), pl::process_count());
      CHECK(copies(after) - copies(before) == 10 * (hi - lo));
      if (rt::mpi::has_shared_segment()) CHECK(after.shared_memory - before.shared_memory == 10 * (hi - lo));
      else CHECK(after.shared_memory == before.shared_memory);
    });
  }
}
