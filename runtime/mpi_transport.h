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
  // Bytes of each process's part of the shared-memory segment of its host (MPI_Win_allocate_shared):
  // while a shard_map over processes runs, arrays of 16 KiB or more (kernel operands, outputs, scratch)
  // come from it, so that a process on the same host copies into them with a memcpy. Virtual memory:
  // pages cost only once touched. When it is full, arrays come from the heap, and copies into them
  // take the slower dynamic window. Capped at half of /dev/shm's free space divided among the
  // processes of the host (where Open MPI keeps it: a page past the end of /dev/shm is a SIGBUS).
  // 0: no segment.
  int64_t shared_bytes = int64_t{1} << 30;
};

// How this process's remote copies toward other processes travelled: a memcpy into the shared
// segment, an MPI_Put through the dynamic window, or the mailbox; and the seconds their senders spent
// on them (from the copy's start until its data landed and its signal left: what a raw MPI_Put, flush,
// MPI_Accumulate on a flag and flush cost). For tests and benchmarks.
struct CopyPaths {
  int64_t shared_memory = 0, window = 0, mailbox = 0;
  double seconds = 0;
};
CopyPaths copy_paths();
// Whether this process has a shared-memory segment (initialize with shared_bytes > 0).
bool has_shared_segment();

// Initialises MPI (MPI_THREAD_MULTIPLE), allocates the window and installs the transport as the
// process transport (set_process_transport). Once per program; MPI is finalised at exit. Throws
// UserError (at `loc`) for a window or segment out of range, a second call, or an MPI without
// thread-multiple support.
void initialize(const Options& options, SourceLoc loc);
// Whether initialize() ran.
bool initialized();

}  // namespace tessera::rt::mpi
