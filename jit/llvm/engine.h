// The JIT engine: one ORC LLJIT per process for the host CPU (detected once), with the runtime's
// ABI functions bound by symbol and libm resolved from the process. It turns an LLVM module into a
// relocatable object (new pass manager at O2, then codegen) and loads objects, each under its own
// resource tracker.
//
// jit/ internal: no LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace llvm {
class Module;
class LLVMContext;
}  // namespace llvm

namespace tessera::jit {

struct Target {
  std::string triple;
  std::string cpu;
  std::string features;
  std::string data_layout;
};

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

  const Target& target() const;
  // Prepares a module for this target (triple and data layout).
  void configure(llvm::Module& module) const;
  // Optimises the module at O2 and returns it as a relocatable object file.
  std::string compile(llvm::Module& module) const;
  // Loads an object file and returns the address of `symbol` in it (with the object kept loaded by
  // the returned handle), or nullptr when the object cannot be loaded.
  std::unique_ptr<LoadedObject> load(const std::string& object, const std::string& symbol);

  struct Impl;

 private:
  Engine();
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::jit
