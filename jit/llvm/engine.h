// The JIT engine: one ORC LLJIT per process for the host CPU, with the runtime's ABI functions
// bound by symbol and libm resolved from the process. It turns an LLVM module into a relocatable
// object for a CpuTarget (jit/llvm/target.h: one TargetMachine per target, made on first use; new
// pass manager at O2, then codegen) and loads objects, each under its own resource tracker.
//
// jit/ internal: no LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jit/llvm/target.h"

namespace llvm {
class Module;
class LLVMContext;
}  // namespace llvm

namespace tessera::jit {

// A loaded object; unloads it when destroyed.
class LoadedObject {
 public:
  virtual ~LoadedObject() = default;
  virtual void* address() const = 0;
};

class Engine {
 public:
  // The process-wide engine, created on first use.
  static Engine& get();

  // Prepares a module for `target` (triple and data layout).
  void configure(llvm::Module& module, const CpuTarget& target) const;
  // Optimises the module at O2 for `target` and returns it as a relocatable object file. Any
  // target compiles on any host; only load() what the host can run.
  std::string compile(llvm::Module& module, const CpuTarget& target) const;
  // Loads an object file and returns the address of `symbol` in it (with the object kept loaded by
  // the returned handle), or nullptr when the object cannot be loaded.
  std::unique_ptr<LoadedObject> load(const std::string& object, const std::string& symbol);

  struct Impl;

 private:
  Engine();
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::jit
