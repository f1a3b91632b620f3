// pl::distributed without initialize(): one process, every device a thread of it, MPI untouched; in a
// build without MPI, initialize() says so. (tests/mpi/distributed_test.cpp runs under mpiexec.)
#include <doctest/doctest.h>

#include <tessera/tessera.hpp>

#include "runtime/transport.h"

namespace pl = tessera;
using doctest::Contains;

TEST_SUITE("dsl") {
  TEST_CASE("pl::distributed: without initialize() this process is process 0 of 1 and runs every device") {
    CHECK_FALSE(pl::distributed::is_initialized());
    CHECK(pl::process_index() == 0);
    CHECK(pl::process_count() == 1);
    CHECK(&tessera::rt::process_transport() == &tessera::rt::threads_transport());
    CHECK(tessera::rt::process_transport().local_devices(8) == std::pair<int64_t, int64_t>{0, 8});
    // The split every transport of several processes uses: contiguous ranges, the remainder spread.
    CHECK(tessera::rt::process_devices(8, 1, 4) == std::pair<int64_t, int64_t>{2, 4});
    CHECK(tessera::rt::process_devices(4, 2, 3) == std::pair<int64_t, int64_t>{2, 4});
    CHECK(tessera::rt::process_devices(2, 0, 4) == std::pair<int64_t, int64_t>{0, 0});
    if (!pl::distributed::available())
      CHECK_THROWS_WITH_AS(pl::distributed::initialize(), Contains("this build of tessera has no MPI transport"),
                           pl::UserError);
  }
}
