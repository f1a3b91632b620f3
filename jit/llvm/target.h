// The CPU targets compiled kernels are generated for: what the host can do (LLVM's host CPU
// detection, plus the Linux permission AMX needs), and the named targets a kernel may ask for
// instead (CompilerParams::target or TESSERA_TARGET): native | avx2 | avx512 | avx512_bf16 | amx.
//
// A CpuTarget says which instruction families the code generator may use (FMA, the vector width,
// AVX-512, its bf16 and int8 dot products, AMX tiles) and carries the LLVM CPU name and feature
// string the engine builds its TargetMachine from (jit/llvm/engine.cpp); the compile cache keys on
// it (jit/llvm/compiler.cpp). Any target can be compiled on any x86-64 host; only targets whose
// features the host has can be run (jit::compile refuses the others with a UserError, while
// jit::compile_object generates code for them anyway, for tests and inspection).
//
// Used by jit/llvm (engine, compiler) and through jit/llvm/compiler.h by the front end and the
// benchmarks. No LLVM types appear here.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit/ir/diagnostics.h"

namespace tessera::jit {

struct CpuTarget {
  std::string name;      // "native", "avx2", "avx512", "avx512_bf16" or "amx"
  std::string triple;    // LLVM target triple
  std::string cpu;       // LLVM CPU name ("znver4", "x86-64-v4", ...)
  std::string features;  // LLVM feature string ("+avx2,+fma,...")
  // The features the code needs from the CPU that runs it (LLVM names), checked against the host.
  std::vector<std::string> required;

  // What the code generator may use.
  int vector_bits = 128;     // widest vector registers: 512 (zmm), 256 (ymm), 128
  bool fma = false;          // vfmadd
  bool avx2 = false;         // 256-bit integer vectors (vpmaddwd on ymm)
  bool avx512 = false;       // AVX-512 F/BW/DQ/VL with 512-bit registers
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16
  bool avx512_vnni = false;  // vpdpbusd on zmm
  bool avx_vnni = false;     // {vex} vpdpbusd on ymm
  bool amx_tile = false;     // tile registers (tileloadd, tilestored)
  bool amx_bf16 = false;     // tdpbf16ps
  bool amx_int8 = false;     // tdpbssd and relatives
  // bf16 x bf16 dots run as FMAs on operands widened to f32 rather than on vdpbf16ps: native on the
  // Intel cores with AVX512_BF16 and no AMX tiles to use, where vdpbf16ps issues at half the rate of
  // the FMAs (jit/llvm/target.cpp).
  bool bf16_on_fma = false;

  bool vnni() const { return avx512_vnni || avx_vnni; }
  // "avx512_bf16 (x86-64-v4: zmm, fma, avx512, avx512_bf16, vnni)"
  std::string str() const;
};

// The named targets, in order of capability: native first, then avx2 ... amx.
std::span<const std::string_view> target_names();

// The description of a named target; "native" is this host (its CPU name and every feature it
// reports, AMX only when the kernel granted the permission to use it). A name outside
// target_names() is a UserError naming `origin` ("TESSERA_TARGET", "CompilerParams::target").
const CpuTarget& cpu_target(std::string_view name, std::string_view origin = "CompilerParams::target", SourceLoc loc = {});

// The target a kernel is compiled for: `requested` (CompilerParams::target) when not empty, else
// TESSERA_TARGET when set, else native.
const CpuTarget& select_target(std::string_view requested, SourceLoc loc = {});

// The features of `target` this host lacks (empty: it can run the code).
std::vector<std::string> missing_on_host(const CpuTarget& target);

// The host's CPU as LLVM names it ("znver4") and its feature list, for reports.
struct HostCpu {
  std::string cpu;
  std::vector<std::string> features;  // the enabled ones, sorted
  bool amx_permission = false;        // the OS let this process use AMX tiles
  bool has(std::string_view feature) const;
};
const HostCpu& host_cpu();

}  // namespace tessera::jit
