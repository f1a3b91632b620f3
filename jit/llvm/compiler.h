// Compiling lowered kernels to native code: the public face of jit/.
//
// compile() returns a loaded kernel with the uniform ABI of runtime/kernel_abi.h. It looks in a
// content-addressed cache first — in memory, then on disk (jit/disk_cache.h) — keyed by the lowered
// IR's text, the host target (triple, CPU, features), the optimisation level and tessera's code
// generator version. TESSERA_LOG=cache says whether each kernel was a hit or a miss and why.
//
// Front-end code includes this header; it has no LLVM types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jit/ir/ir.h"
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

// Compiles `lowered` for the host CPU, or returns it from a cache.
std::shared_ptr<const CompiledKernel> compile(const ir::Function& lowered);

// The content key of a lowered kernel on this machine (32 hex digits).
std::string cache_key(const ir::Function& lowered);

// A description of the host target, e.g. "x86_64-unknown-linux-gnu znver3".
std::string host_target();

}  // namespace tessera::jit
