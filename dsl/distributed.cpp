#include "dsl/distributed.h"

#include "jit/ir/diagnostics.h"
#include "runtime/transport.h"
#if defined(TESSERA_MPI) && TESSERA_MPI
#include "runtime/mpi_transport.h"
#endif

namespace tessera {

namespace distributed {

void initialize(const Options& options, std::source_location loc) {
#if defined(TESSERA_MPI) && TESSERA_MPI
  rt::mpi::initialize(rt::mpi::Options{.window_bytes = options.window_bytes, .shared_bytes = options.shared_bytes}, loc);
#else
  (void)options;
  throw UserError("pl::distributed::initialize: this build of tessera has no MPI transport",
                  "a build with TESSERA_MPI off (CMake found no MPI)",
                  "install an MPI (scripts/install-deps.sh installs Open MPI) and reconfigure: TESSERA_MPI turns on "
                  "when CMake finds one",
                  loc);
#endif
}

bool is_initialized() {
#if defined(TESSERA_MPI) && TESSERA_MPI
  return rt::mpi::initialized();
#else
  return false;
#endif
}

bool available() {
#if defined(TESSERA_MPI) && TESSERA_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace distributed

int process_index() { return rt::process_transport().process_index(); }
int process_count() { return rt::process_transport().process_count(); }

}  // namespace tessera
