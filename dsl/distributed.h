// Devices across processes (docs/design.md §4c), as jax.distributed:
//
//   pl::distributed::initialize();                 once, in a program launched under mpiexec
//   int p = pl::process_index(), n = pl::process_count();
//   pl::Mesh mesh({4}, {"x"});                      devices [p*4/n, (p+1)*4/n) run in process p
//   auto y = pl::shard_map(f, mesh, {pl::P("x")}, {pl::P("x")})(x);   same x everywhere; y complete everywhere
//
// Without initialize() everything runs in this process and MPI is never touched. A build without MPI
// (TESSERA_MPI off) has the same API: initialize() throws a UserError saying so, and the process is
// process 0 of 1.
//
// Front-end layer (dsl/).
#pragma once

#include <cstdint>
#include <source_location>

namespace tessera {

namespace distributed {

struct Options {
  // Bytes of this process's MPI window: remote copies and signals that other processes send it land
  // there first. One shard_map call may send a process at most about this much.
  int64_t window_bytes = int64_t{64} << 20;
  // Bytes of this process's part of its host's shared-memory segment: while a shard_map runs, arrays
  // of 16 KiB or more come from it, so that another process on the host copies into them with a
  // memcpy (beyond it, through MPI: about 3x slower). Virtual memory in /dev/shm, paid for only once
  // touched, and capped at half of /dev/shm's free space divided among the host's processes. 0: no
  // segment.
  int64_t shared_bytes = int64_t{1} << 30;
};

// Initialises MPI (MPI_THREAD_MULTIPLE) and makes every later shard_map spread its mesh's devices over
// the processes. Once per program, before the first shard_map; MPI is finalised at exit.
void initialize(const Options& options = {}, std::source_location loc = std::source_location::current());
// Whether initialize() ran.
bool is_initialized();
// Whether this build has the MPI transport.
bool available();

}  // namespace distributed

// This process's index among those of the launch, and their number (0 and 1 without initialize()).
int process_index();
int process_count();

}  // namespace tessera
