// Compiling lowered kernels to native code: the public face of jit/.
//
// compile() returns a loaded kernel with the uniform ABI of runtime/kernel_abi.h, generated for a
// CPU target (jit/llvm/target.h: CompilerParams::target, else TESSERA_TARGET, else native). It
// looks in a content-addressed cache first — in memory, then on disk (jit/disk_cache.h) — keyed by
// the lowered IR's text, the target (name, triple, CPU, features), the optimisation level and
// tessera's code generator version. TESSERA_LOG=cache says whether each kernel was a hit or a miss
// and why. compile_object() only generates code, for any target on any host.
//
// Front-end code includes this header; it has no LLVM types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jit/ir/ir.h"
#include "jit/llvm/target.h"
#include "runtime/kernel_abi.h"

namespace tessera::jit {

using KernelEntry = rt::KernelEntry;

class LoadedObject;

class CompiledKernel {
 public:
  enum class Source { Compiled, MemoryCache, DiskCache };

  CompiledKernel(std::string key, KernelEntry entry, std::shared_ptr<LoadedObject> object, Source source,
                 double milliseconds);
  KernelEntry entry() const { return entry_; }
  const std::string& key() const { return key_; }
  // Where this handle came from when compile() returned it, and how long that took.
  Source source() const { return source_; }
  double milliseconds() const { return milliseconds_; }

 private:
  std::string key_;
  KernelEntry entry_;
  std::shared_ptr<LoadedObject> object_;  // keeps the code loaded
  Source source_;
  double milliseconds_;
};

// Compiles `lowered` for the named target (empty: TESSERA_TARGET, else native), or returns it from
// a cache. A target this CPU cannot run is a UserError pointing at `loc`.
std::shared_ptr<const CompiledKernel> compile(const ir::Function& lowered, std::string_view target = {},
                                              SourceLoc loc = {});

// The relocatable object file `lowered` compiles to for the named target, whether or not this CPU
// can run it; nothing is cached or loaded. For tests and inspection (jit/llvm/disassembler.h).
std::string compile_object(const ir::Function& lowered, std::string_view target);

// The content key of a lowered kernel for a target on this machine (32 hex digits).
std::string cache_key(const ir::Function& lowered, std::string_view target = {});

// A description of the host target, e.g. "x86_64-unknown-linux-gnu znver3".
std::string host_target();

}  // namespace tessera::jit
