// The MPI transport (docs/design.md §4c): the devices of a mesh spread over the processes of an
// mpiexec launch, remote copies and signals as MPI one-sided operations. Built only with TESSERA_MPI;
// this header names no MPI type, so that nothing else sees MPI's headers.
//
// Runtime layer; users reach it through pl::distributed::initialize (dsl/distributed.h).
#pragma once

#include <cstdint>

#include "jit/ir/diagnostics.h"
#include "runtime/transport.h"

namespace tessera::rt::mpi {

struct Options {
  // Bytes of each process's window: its mailbox of copies and signals that arrived and the words of
  // the deadlock protocol. One shard_map call may send a process at most about this much.
  int64_t window_bytes = int64_t{64} << 20;
};

// Initialises MPI (MPI_THREAD_MULTIPLE), allocates the window and installs the transport as the
// process transport (set_process_transport). Once per program; MPI is finalised at exit. Throws
// UserError (at `loc`) for a window out of range, a second call, or an MPI without thread-multiple support.
void initialize(const Options& options, SourceLoc loc);
// Whether initialize() ran.
bool initialized();

}  // namespace tessera::rt::mpi
