#include "jit/llvm/target.h"

#include <fmt/format.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

#include "runtime/config.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessera::jit {

namespace {

constexpr std::array<std::string_view, 5> kNames = {"native", "avx2", "avx512", "avx512_bf16", "amx"};

// Features of the generic x86-64 levels the named targets build on. The CPU names x86-64-v3/v4
// imply them (and no tuning for one vendor); they are listed so that the host check covers every
// instruction the code may contain.
const std::vector<std::string> kV3 = {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"};
// PREFETCHW is not part of x86-64-v4, but every AVX-512 CPU has it (Intel since Broadwell, AMD
// always): the f32 tiles' prefetches of packed slots for writing (SpreadPrefetch) use it.
const std::vector<std::string> kV4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512", "prfchw"};
const std::vector<std::string> kBf16 = {"avx512bf16", "avx512vnni"};
const std::vector<std::string> kAmx = {"amx-tile", "amx-bf16", "amx-int8"};

// Linux hands out the AMX tile state only on request, once per process; without it the first
// tile instruction is SIGILL. LLVM reports amx-* from CPUID and XCR0 alone, so ask here and treat
// a refusal as no AMX.
bool request_amx_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kGetPerm = 0x1022, kReqPerm = 0x1023, kXtileData = 18;
  if (syscall(SYS_arch_prctl, kReqPerm, kXtileData) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kGetPerm, &mask) != 0) return false;
  return (mask >> kXtileData) & 1;
#else
  return false;
#endif
}

struct Host {
  HostCpu cpu;
  std::map<std::string, bool> features;  // every feature LLVM knows of, enabled or not
};

const Host& host() {
  static const Host h = [] {
    Host h;
    h.cpu.cpu = llvm::sys::getHostCPUName().str();
    for (const auto& f : llvm::sys::getHostCPUFeatures()) h.features[f.getKey().str()] = f.getValue();
    if (h.features["amx-tile"]) {
      h.cpu.amx_permission = request_amx_permission();
      if (!h.cpu.amx_permission)
        for (const char* f : {"amx-tile", "amx-bf16", "amx-int8", "amx-fp16", "amx-complex"})
          if (h.features.count(f)) h.features[f] = false;
    }
    for (const auto& [name, on] : h.features)
      if (on) h.cpu.features.push_back(name);
    return h;
  }();
  return h;
}

bool host_has(const std::string& f) {
  auto it = host().features.find(f);
  return it != host().features.end() && it->second;
}

// Fills the capability flags from a feature predicate.
template <class Has>
void describe(CpuTarget& t, Has has) {
  t.avx512 = has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") && has("evex512");
  t.vector_bits = t.avx512 ? 512 : has("avx") ? 256 : 128;
  t.fma = has("fma");
  t.avx2 = has("avx2");
  t.avx512_bf16 = t.avx512 && has("avx512bf16");
  t.avx512_vnni = t.avx512 && has("avx512vnni");
  t.avx_vnni = has("avxvnni");
  t.amx_tile = has("amx-tile");
  t.amx_bf16 = t.amx_tile && has("amx-bf16");
  t.amx_int8 = t.amx_tile && has("amx-int8");
}

// Host features the code generator does not use. f16 is a storage type computed in f32 (§5 of the
// design): with AVX512-FP16 LLVM narrows `fptrunc(op(fpext x))` into a native half op, which agrees
// in value but not in NaN bits (neg and abs of a signalling NaN stay signalling in half, are quieted
// through f32), so f16 results would differ between this CPU, every other target and the interpreter.
bool kept_from_codegen(std::string_view feature) { return feature == "avx512fp16"; }

// The Intel cores with AVX512_BF16 (LLVM's names). Their vdpbf16ps, 32 products a lane pair, issues
// once every two cycles where the FMA, 16 products, issues twice a cycle: bench_gemm's register-only
// loops read 95 against 186 GFLOP/s on an Emerald Rapids class core, and the seed matmul in bf16 ran
// 1.43x oneDNN's bf16 matmul (which uses vdpbf16ps) as FMAs on widened operands, where vdpbf16ps
// read 1.0x. AMD's Zen 4 and Zen 5 issue vdpbf16ps at the FMA's instruction rate, twice its
// products, so they keep it.
bool vdpbf16ps_at_half_rate(std::string_view cpu) {
  for (std::string_view intel : {"cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
                                 "diamondrapids"})
    if (cpu == intel) return true;
  return false;
}

CpuTarget make_native() {
  CpuTarget t;
  t.name = "native";
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = host().cpu.cpu;
  std::vector<std::string> parts;
  for (const auto& [name, on] : host().features)
    parts.push_back((on && !kept_from_codegen(name) ? "+" : "-") + name);
  t.features = fmt::format("{}", fmt::join(parts, ","));
  t.required = host().cpu.features;
  describe(t, host_has);
  // With AMX tiles the bf16 dot runs on them (their edges on vdpbf16ps, reading the same packing).
  t.bf16_on_fma = t.avx512_bf16 && !t.amx_bf16 && vdpbf16ps_at_half_rate(t.cpu);
  return t;
}

CpuTarget make_named(std::string_view name) {
  CpuTarget t;
  t.name = std::string(name);
  // Named targets are x86-64 code whatever the host; on another architecture they are compile-only.
  t.triple = "x86_64-unknown-linux-gnu";
  const bool v4 = name != "avx2";
  t.cpu = v4 ? "x86-64-v4" : "x86-64-v3";
  t.required = kV3;
  if (v4) t.required.insert(t.required.end(), kV4.begin(), kV4.end());
  if (name == "avx512_bf16" || name == "amx") t.required.insert(t.required.end(), kBf16.begin(), kBf16.end());
  if (name == "amx") t.required.insert(t.required.end(), kAmx.begin(), kAmx.end());
  std::vector<std::string> parts;
  for (const std::string& f : t.required) parts.push_back("+" + f);
  t.features = fmt::format("{}", fmt::join(parts, ","));
  describe(t, [&](const char* f) { return std::find(t.required.begin(), t.required.end(), f) != t.required.end(); });
  return t;
}

std::string accepted() { return fmt::format("{}", fmt::join(kNames, ", ")); }

}  // namespace

std::string CpuTarget::str() const {
  std::vector<std::string> caps;
  caps.push_back(vector_bits == 512 ? "zmm" : vector_bits == 256 ? "ymm" : "xmm");
  if (fma) caps.push_back("fma");
  if (avx512) caps.push_back("avx512");
  if (avx512_bf16) caps.push_back(bf16_on_fma ? "avx512_bf16 (bf16 dots on fma)" : "avx512_bf16");
  if (avx512_vnni) caps.push_back("avx512_vnni");
  if (avx_vnni) caps.push_back("avx_vnni");
  if (amx_bf16) caps.push_back("amx_bf16");
  if (amx_int8) caps.push_back("amx_int8");
  return fmt::format("{} ({}: {})", name, cpu, fmt::join(caps, ", "));
}

std::span<const std::string_view> target_names() { return kNames; }

const CpuTarget& cpu_target(std::string_view name, std::string_view origin, SourceLoc loc) {
  // Built once each and never freed: kernels keep pointers to them.
  static std::mutex mutex;
  static std::map<std::string, CpuTarget, std::less<>>* targets = new std::map<std::string, CpuTarget, std::less<>>();
  if (std::find(kNames.begin(), kNames.end(), name) == kNames.end())
    throw UserError(fmt::format("{} names no CPU target", origin), fmt::format("{}=\"{}\"", origin, name),
                    fmt::format("use one of {} (or leave it unset for native)", accepted()), loc);
  std::lock_guard lock(mutex);
  auto it = targets->find(name);
  if (it == targets->end())
    it = targets->emplace(std::string(name), name == "native" ? make_native() : make_named(name)).first;
  return it->second;
}

const CpuTarget& select_target(std::string_view requested, SourceLoc loc) {
  if (!requested.empty()) return cpu_target(requested, "CompilerParams::target", loc);
  // The one place TESSERA_TARGET is read; read at each compile, so a process may change it.
  return cpu_target(config::target(), "TESSERA_TARGET", loc);
}

std::vector<std::string> missing_on_host(const CpuTarget& target) {
  std::vector<std::string> missing;
#if !defined(__x86_64__)
  // The named targets are x86-64 code: compile-only elsewhere.
  if (target.name != "native") return {"an x86-64 CPU"};
#endif
  for (const std::string& f : target.required)
    if (!host_has(f)) missing.push_back(f);
  return missing;
}

bool HostCpu::has(std::string_view feature) const {
  return std::binary_search(features.begin(), features.end(), feature, std::less<>());
}

const HostCpu& host_cpu() { return host().cpu; }

}  // namespace tessera::jit
