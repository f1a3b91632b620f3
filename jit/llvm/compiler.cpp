#include "jit/llvm/compiler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Support/xxhash.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "jit/ir/printer.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/disk_cache.h"
#include "jit/llvm/engine.h"
#include "runtime/config.h"

#ifndef TESSERA_CODEGEN_HASH
#define TESSERA_CODEGEN_HASH "dev"
#endif
#ifndef TESSERA_VERSION
#define TESSERA_VERSION "0"
#endif

namespace tessera::jit {

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Loaded kernels by key. Entries do not keep kernels alive: a kernel no call uses any more is
// unloaded, and found on disk if it is needed again.
struct MemoryCache {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<LoadedObject>> kernels;
};
MemoryCache& memory_cache() {
  static MemoryCache* cache = new MemoryCache();  // outlives every kernel
  return *cache;
}

void log_cache(const char* what, const std::string& name, const std::string& key, double ms, const std::string& detail = {}) {
  if (!config::log_enabled("cache")) return;
  std::fprintf(stderr, "tessera cache: %s for `%s` (key %s) in %.2f ms%s\n", what, name.c_str(), key.c_str(), ms,
               detail.c_str());
}

}  // namespace

CompiledKernel::CompiledKernel(std::string key, KernelEntry entry, std::shared_ptr<LoadedObject> object, Source source,
                               double milliseconds)
    : key_(std::move(key)), entry_(entry), object_(std::move(object)), source_(source), milliseconds_(milliseconds) {}

namespace {

std::string key_for(const ir::Function& lowered, const CpuTarget& t) {
  std::string text = fmt::format("tessera {} codegen {}\ntarget {} {} {} {} {}\nopt O2\n{}", TESSERA_VERSION,
                                 TESSERA_CODEGEN_HASH, t.name, t.triple, t.cpu, t.features, t.vector_bits,
                                 ir::print(lowered));
  // Compiled code names ops by their index in the function (its runtime calls pass it), which the
  // printed text does not show: two functions that print alike but store their ops in another order
  // must not share an object.
  text += "op order";
  for (const ir::Op& op : lowered.ops)
    text += fmt::format(" {}({})->({})", static_cast<int>(op.kind), fmt::join(op.operands, ","), fmt::join(op.results, ","));
  llvm::XXH128_hash_t h = llvm::xxh3_128bits(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// Generates `lowered` into a fresh module for `t` and returns the object file.
std::string generate(const ir::Function& lowered, const CpuTarget& t, const std::string& symbol) {
  Engine& engine = Engine::get();
  llvm::LLVMContext context;
  llvm::Module module(symbol, context);
  engine.configure(module, t);
  emit_kernel(lowered, module, symbol, t);
  std::string object = engine.compile(module, t);
  if (config::dump_llvm()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module.print(os, nullptr);
    std::fprintf(stderr, "// ---- optimised LLVM IR of `%s` for %s ----\n%s", lowered.name.c_str(), t.name.c_str(),
                 os.str().c_str());
  }
  return object;
}

}  // namespace

std::string host_target() {
  const CpuTarget& t = cpu_target("native");
  return t.triple + " " + t.cpu;
}

std::string cache_key(const ir::Function& lowered, std::string_view target) {
  return key_for(lowered, select_target(target));
}

std::string compile_object(const ir::Function& lowered, std::string_view target) {
  const CpuTarget& t = select_target(target);
  return generate(lowered, t, "tessera_kernel_" + key_for(lowered, t));
}

std::shared_ptr<const CompiledKernel> compile(const ir::Function& lowered, std::string_view target, SourceLoc loc) {
  auto start = std::chrono::steady_clock::now();
  Engine& engine = Engine::get();
  const CpuTarget& t = select_target(target, loc);
  if (std::vector<std::string> missing = missing_on_host(t); !missing.empty()) {
    std::vector<std::string> runnable;
    for (std::string_view name : target_names())
      if (missing_on_host(cpu_target(name)).empty()) runnable.emplace_back(name);
    throw UserError(fmt::format("kernel `{}`: this CPU cannot run code compiled for target `{}`", lowered.name, t.name),
                    fmt::format("target {} (from {}); this CPU ({}) lacks {}", t.str(),
                                target.empty() ? "TESSERA_TARGET" : "CompilerParams::target", host_cpu().cpu,
                                fmt::join(missing, ", ")),
                    fmt::format("choose a target this CPU runs ({}) in CompilerParams::target or TESSERA_TARGET, or "
                                "generate code without running it with jit::compile_object",
                                fmt::join(runnable, ", ")),
                    loc);
  }
  const std::string key = key_for(lowered, t);
  const std::string symbol = "tessera_kernel_" + key;
  MemoryCache& mem = memory_cache();
  std::lock_guard lock(mem.mutex);  // one compile at a time: LLVM's target machine is shared
  if (std::shared_ptr<LoadedObject> hit = mem.kernels[key].lock()) {
    auto kernel = std::make_shared<const CompiledKernel>(key, reinterpret_cast<KernelEntry>(hit->address()), hit,
                                                         CompiledKernel::Source::MemoryCache, ms_since(start));
    log_cache("hit (memory)", lowered.name, key, kernel->milliseconds());
    return kernel;
  }
  DiskCache disk = DiskCache::from_environment();
  std::string why = disk.enabled() ? "not on disk" : "disk cache off";
  if (auto object = disk.load(key)) {
    if (std::shared_ptr<LoadedObject> loaded = engine.load(*object, symbol)) {
      KernelEntry entry = reinterpret_cast<KernelEntry>(loaded->address());
      auto kernel = std::make_shared<const CompiledKernel>(key, entry, loaded, CompiledKernel::Source::DiskCache,
                                                           ms_since(start));
      mem.kernels[key] = loaded;
      log_cache("hit (disk)", lowered.name, key, kernel->milliseconds(), " from " + disk.path(key));
      return kernel;
    }
    why = "the cached object could not be loaded";
  }
  const double lookup_ms = ms_since(start);
  std::string object = generate(lowered, t, symbol);
  const double compile_ms = ms_since(start) - lookup_ms;
  const bool stored = disk.store(key, object);
  std::shared_ptr<LoadedObject> loaded = engine.load(object, symbol);
  if (!loaded) throw InternalError("jit", fmt::format("the object compiled for `{}` could not be loaded", lowered.name));
  KernelEntry entry = reinterpret_cast<KernelEntry>(loaded->address());
  auto kernel = std::make_shared<const CompiledKernel>(key, entry, loaded, CompiledKernel::Source::Compiled,
                                                       ms_since(start));
  mem.kernels[key] = loaded;
  log_cache("miss, compiled", lowered.name, key, kernel->milliseconds(),
            fmt::format(" ({}; target {}; generate, optimise and emit {:.2f} ms{})", why, t.name, compile_ms,
                        stored ? ", stored" : ""));
  return kernel;
}

}  // namespace tessera::jit
