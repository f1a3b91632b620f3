// Code generation per CPU target: every named target compiles anywhere (compile_object), and its
// object code, read back with the MC disassembler, uses what the target allows and nothing more;
// targets this CPU runs give the same results as native; the selection and its errors
// (CompilerParams::target, TESSERA_TARGET, a target the CPU lacks).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>

#include "examples/seed_matmul.h"
#include "jit/llvm/compiler.h"
#include "jit/llvm/disassembler.h"
#include "runtime/config.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// Sets (or, given nullptr, unsets) an environment variable while the object lives.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The kernels whose code is inspected, lowered once (the lowered IR does not depend on the target).
struct Kernels {
  std::vector<pl::PallasCall<pl::Array>> calls;
  std::map<std::string, const ir::Function*> lowered;
};

const Kernels& kernels() {
  static const Kernels* k = [] {
    auto* k = new Kernels();
    k->calls.reserve(5);
    // The seed's matmul (acc() += dot(x(), y(), f32) on 128-blocks): the GEMM micro-kernel.
    k->calls.push_back(seed::make_matmul(256, 256, 256, pl::f32));
    k->lowered["matmul_f32"] = &k->calls.back().lowered({pl::Array::zeros({256, 256}, pl::f32), pl::Array::zeros({256, 256}, pl::f32)});
    k->calls.push_back(seed::make_matmul(256, 256, 256, pl::bf16));
    k->lowered["matmul_bf16"] = &k->calls.back().lowered({pl::Array::zeros({256, 256}, pl::bf16), pl::Array::zeros({256, 256}, pl::bf16)});
    // An int8 dot with int32 accumulation.
    k->calls.push_back(pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::dot(x(), y(), pl::i32); },
                                       pl::GridSpec{}, pl::ShapeDtype({64, 64}, pl::i32)));
    k->lowered["dot_i8"] = &k->calls.back().lowered({pl::Array::zeros({64, 64}, pl::i8), pl::Array::zeros({64, 64}, pl::i8)});
    // A bf16 dot whose C is not whole 16 x 16 tiles and whose k is not whole AMX k steps (40 x 72 x 40):
    // on amx, tiles for the first 32 rows and columns and the AVX-512 tile for the rest.
    k->calls.push_back(pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::dot(x(), y(), pl::f32); },
                                       pl::GridSpec{}, pl::ShapeDtype({40, 40}, pl::f32)));
    k->lowered["dot_bf16_edges"] = &k->calls.back().lowered({pl::Array::zeros({40, 72}, pl::bf16), pl::Array::zeros({72, 40}, pl::bf16)});
    // Element-wise: a multiply-add over 4096 floats, left to LLVM's loop vectoriser.
    k->calls.push_back(pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() * y() + x(); }, pl::GridSpec{},
                                       pl::ShapeDtype({4096}, pl::f32)));
    k->lowered["elementwise_f32"] = &k->calls.back().lowered({pl::Array::zeros({4096}, pl::f32), pl::Array::zeros({4096}, pl::f32)});
    return k;
  }();
  return *k;
}

struct Code {
  std::vector<jit::Instruction> instructions;
  int count(std::string_view mnemonic_prefix, std::string_view operand = {}) const {
    return static_cast<int>(std::count_if(instructions.begin(), instructions.end(), [&](const jit::Instruction& i) {
      return i.mnemonic.starts_with(mnemonic_prefix) && i.text.find(operand) != std::string::npos;
    }));
  }
  int with_register(std::string_view reg) const { return count("", reg); }
};

Code code(const std::string& kernel, std::string_view target) {
  return {jit::disassemble(jit::compile_object(*kernels().lowered.at(kernel), target))};
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("target: each named target describes what it may use") {
    const jit::CpuTarget& avx2 = jit::cpu_target("avx2");
    CHECK(avx2.vector_bits == 256);
    CHECK(avx2.fma);
    CHECK(!avx2.avx512);
    CHECK(!avx2.vnni());
    const jit::CpuTarget& avx512 = jit::cpu_target("avx512");
    CHECK(avx512.vector_bits == 512);
    CHECK(avx512.avx512);
    CHECK(!avx512.avx512_bf16);
    const jit::CpuTarget& bf16 = jit::cpu_target("avx512_bf16");
    CHECK(bf16.avx512_bf16);
    CHECK(bf16.avx512_vnni);
    CHECK(!bf16.amx_tile);
    const jit::CpuTarget& amx = jit::cpu_target("amx");
    CHECK(amx.amx_bf16);
    CHECK(amx.amx_int8);
    CHECK(amx.avx512_bf16);
    // Only a native target may keep bf16 dots on the FMAs (an Intel core whose vdpbf16ps runs at
    // half their rate, without AMX tiles): every named target runs what its name says.
    for (std::string_view name : jit::target_names())
      if (name != "native") CHECK(!jit::cpu_target(name).bf16_on_fma);
    const jit::CpuTarget& native = jit::cpu_target("native");
    if (native.bf16_on_fma) {
      CHECK(native.avx512_bf16);
      CHECK(!native.amx_bf16);
      CHECK(!native.cpu.starts_with("znver"));
    }
    CHECK(native.cpu == jit::host_cpu().cpu);
    CHECK(jit::missing_on_host(native).empty());
    // The host's AMX is only usable with the OS's permission.
    CHECK(native.amx_tile == (jit::host_cpu().has("amx-tile") && jit::host_cpu().amx_permission));
    MESSAGE("host: " << jit::host_cpu().cpu << ", native target " << native.str());
    // f16 is computed in f32 on every target: native half arithmetic (AVX512-FP16) would give other
    // NaN bits than the interpreter (element_rules_test's neg and abs of f16 edge values, on such a CPU).
    CHECK(native.features.find("+avx512fp16") == std::string::npos);
    if (jit::host_cpu().has("avx512fp16")) CHECK(native.features.find("-avx512fp16") != std::string::npos);
  }

  TEST_CASE("target: the cache key includes the target") {
    const ir::Function& fn = *kernels().lowered.at("elementwise_f32");
    CHECK(jit::cache_key(fn, "avx2") != jit::cache_key(fn, "avx512"));
    CHECK(jit::cache_key(fn, "avx512") != jit::cache_key(fn, "avx512_bf16"));
    {
      EnvVar unset("TESSERA_TARGET", nullptr);
      CHECK(jit::cache_key(fn) == jit::cache_key(fn, "native"));
    }
    EnvVar env("TESSERA_TARGET", "avx2");
    CHECK(jit::cache_key(fn) == jit::cache_key(fn, "avx2"));
  }

  TEST_CASE("target: an unknown target name is a UserError naming where it came from and the accepted names") {
    // TESSERA_TARGET's accepted words are declared in the runtime's configuration table, which cannot
    // see the LLVM backend: the two lists must agree.
    const auto& declared = config::variable(config::Var::target).choices;
    CHECK(std::vector<std::string_view>(declared.begin(), declared.end()) ==
          std::vector<std::string_view>(jit::target_names().begin(), jit::target_names().end()));
    {
      EnvVar env("TESSERA_TARGET", "avx9000");
      try {
        jit::select_target("");
        FAIL("no error");
      } catch (const UserError& e) {
        const std::string what = e.what();
        CHECK(what.find("TESSERA_TARGET") != std::string::npos);
        CHECK(what.find("avx9000") != std::string::npos);
        CHECK(what.find("native, avx2, avx512, avx512_bf16, amx") != std::string::npos);
      }
    }
    pl::CallOptions options;
    options.compiler_params.target = "sse";
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x() + 1.0f; }, pl::GridSpec{},
                                pl::ShapeDtype({16}, pl::f32), options);
    try {
      call(pl::Array::zeros({16}, pl::f32));
      FAIL("no error");
    } catch (const UserError& e) {
      const std::string what = e.what();
      CHECK(what.find("CompilerParams::target") != std::string::npos);
      CHECK(what.find("\"sse\"") != std::string::npos);
    }
  }

  TEST_CASE("target: every target this CPU runs gives native results, the others are a UserError") {
    pl::Array x = pl::Array::random_normal({256, 256}, pl::f32, 1), y = pl::Array::random_normal({256, 256}, pl::f32, 2);
    const pl::Array want = seed::make_matmul(256, 256, 256, pl::f32)(x, y);
    for (std::string_view name : jit::target_names()) {
      INFO("target " << std::string(name));
      pl::CallOptions options;
      options.compiler_params.target = std::string(name);
      auto call = seed::make_matmul(256, 256, 256, pl::f32, options);
      if (jit::missing_on_host(jit::cpu_target(name)).empty()) {
        CHECK(pl::allclose(call(x, y), want, 1e-4, 1e-4));
        continue;
      }
      try {
        call(x, y);
        FAIL("no error");
      } catch (const UserError& e) {
        const std::string what = e.what();
        CHECK(what.find("cannot run code compiled for target `" + std::string(name) + "`") != std::string::npos);
        CHECK(what.find("lacks") != std::string::npos);
        CHECK(what.find("compile_object") != std::string::npos);
      }
    }
    // TESSERA_TARGET selects too, when CompilerParams::target is empty.
    EnvVar env("TESSERA_TARGET", "avx2");
    if (jit::missing_on_host(jit::cpu_target("avx2")).empty())
      CHECK(pl::allclose(seed::make_matmul(256, 256, 256, pl::f32, {.name = "matmul_env"})(x, y), want, 1e-4, 1e-4));
  }

  TEST_CASE("target: each target's code, disassembled, uses the registers and instructions the target allows") {
    for (std::string_view name : jit::target_names()) {
      const jit::CpuTarget& t = jit::cpu_target(name);
      INFO("target " << t.str());
      for (const auto& [kernel, fn] : kernels().lowered) {
        INFO("kernel " << kernel);
        const Code c = code(kernel, name);
        CHECK(!c.instructions.empty());
        CHECK(c.count("(bad)") == 0);
        // 512-bit registers exactly where the target has them: never on avx2.
        if (t.vector_bits < 512) CHECK(c.with_register("zmm") == 0);
      }
      // Element-wise loops are vectorised at the target's width (Engine::compile sets
      // prefer-vector-width from it).
      const Code ew = code("elementwise_f32", name);
      const std::string_view reg = t.vector_bits == 512 ? "zmm" : "ymm";
      CHECK(ew.count("vmulps", reg) > 0);
      CHECK(ew.count("vaddps", reg) > 0);
    }
  }

  // The dot micro-kernel follows the target (jit/llvm/gemm.h): an 8 x 32 tile of zmm FMAs on the
  // AVX-512 targets, 6 x 16 of ymm FMAs on avx2, and for bf16 x bf16 on avx512_bf16 the 8 x 32 tile on
  // vdpbf16ps instead of FMAs (but for a native target that keeps bf16 on the FMAs). Int8 x int8 -> i32 dots run the 8 x 32 tile on zmm vpdpbusd (k quads)
  // where AVX512_VNNI is allowed, elsewhere the f32 tile's shape on vpmaddwd (k pairs of words). On
  // amx both run on AMX tiles (jit/llvm/amx_gemm.h): the tile configuration loaded, tiles loaded,
  // multiplied (tdpbf16ps, tdpbssd), stored and the tile state released; the seed matmul's blocks and
  // the 64 x 64 int8 dot are whole tiles, so no AVX-512 dot runs there, while a dot with edges runs
  // both. No other target, and no f32 dot, emits a tile instruction. This compiles on any host; the
  // tiles' layout and the emitted code, tiles emulated, are run in tests/llvm/amx_test.cpp.
  TEST_CASE("target: the dot micro-kernel's instructions follow the target") {
    for (std::string_view name : jit::target_names()) {
      const jit::CpuTarget& t = jit::cpu_target(name);
      INFO("target " << t.str());
      const Code f32 = code("matmul_f32", name), bf16 = code("matmul_bf16", name), i8 = code("dot_i8", name),
                 edges = code("dot_bf16_edges", name);
      if (t.amx_bf16) {
        for (const Code* c : {&bf16, &edges}) {
          CHECK(c->count("ldtilecfg") >= 1);
          CHECK(c->count("tileloadd") >= 4);   // 2 A and 2 B tiles per k step of a 2 x 2 block
          CHECK(c->count("tdpbf16ps") >= 4);   // its 4 accumulators
          CHECK(c->count("tilestored") >= 4);  // written back to C
          CHECK(c->count("tilerelease") >= 1);
        }
        CHECK(bf16.count("vdpbf16ps") == 0);
        CHECK(edges.count("vdpbf16ps", "zmm") >= 16);  // the edges' 8 x 32 tile
        CHECK(bf16.count("vfmadd") == 0);
      } else if (t.avx512_bf16 && !t.bf16_on_fma) {
        CHECK(bf16.count("vdpbf16ps", "zmm") >= 16);  // the 16 accumulators of one 8 x 32 tile
        CHECK(bf16.count("vfmadd") == 0);
      } else {
        CHECK(bf16.count("vdpbf16ps") == 0);
      }
      if (!t.amx_bf16)
        for (const Code* c : {&bf16, &edges}) CHECK(c->count("tdpbf16ps") == 0);
      for (const Code* c : {&f32, &bf16}) {
        if (c == &bf16 && t.avx512_bf16 && !t.bf16_on_fma) continue;
        if (t.avx512) {
          CHECK(c->count("vfmadd231ps", "zmm") >= 16);  // the 16 accumulators of one 8 x 32 tile
        } else {
          CHECK(c->count("vfmadd", "zmm") == 0);
          CHECK(c->count("vfmadd231ps", "ymm") >= 12);  // the 12 accumulators of one 6 x 16 tile
        }
      }
      if (t.amx_int8) {
        CHECK(i8.count("ldtilecfg") >= 1);
        CHECK(i8.count("tdpbssd") >= 4);
        CHECK(i8.count("tilestored") >= 4);
        CHECK(i8.count("tilerelease") >= 1);
        CHECK(i8.count("vpdpbusd") == 0);
      } else if (t.avx512_vnni) {
        CHECK(i8.count("vpdpbusd", "zmm") >= 16);  // the 16 accumulators of one 8 x 32 tile
        CHECK(i8.count("vpmulld") == 0);
        // B carries the bias (jit/llvm/gemm.cpp, pack_b_quads): each row's A quad is vpdpbusd's
        // signed operand as it is in memory, a broadcast load (or the instruction's own {1to16}) for
        // each of the tile's 8 rows, not a scalar load, xor and register broadcast, which on a core
        // with two vector ports took one of them for every two vpdpbusd.
        CHECK(i8.count("vpbroadcastd", "dword ptr") + i8.count("vpdpbusd", "1to16") >= 8);
      } else {
        // No VNNI: vpmaddwd on k pairs of the bytes widened to words (gemm_int8_words), one per
        // accumulator of the f32 tile's shape, and no scalar-order loop's vpmulld.
        CHECK(i8.count("vpdpbusd") == 0);
        CHECK(i8.count("vpmaddwd", t.avx512 ? "zmm" : "ymm") >= (t.avx512 ? 16 : 12));
        CHECK(i8.count("vpmulld") == 0);
      }
      if (!t.amx_int8) CHECK(i8.count("tdpb") == 0);
      CHECK(f32.count("tdpb") == 0);
      for (const Code* c : {&f32, &bf16, &i8, &edges}) {
        if (c != &f32 && t.amx_tile) continue;
        CHECK(c->count("ldtilecfg") == 0);
        CHECK(c->count("tileloadd") == 0);
        CHECK(c->count("tilestored") == 0);
        CHECK(c->count("tilerelease") == 0);
      }
    }
  }

  // The f32 and bf16-pair tiles run eight k steps a trip of their k loops (jit/llvm/gemm.cpp,
  // emit_k_loop): the seed's 128-deep k is unrolled, so one loop body holds eight steps' FMAs. The
  // micro-tiles on a packed block of a kernel parameter also carry the spread prefetch queue
  // (SpreadPrefetch, jit/llvm/gemm.h), issued from inside the tiles' k loops rather than in a loop
  // of their own after the pack: the next block of B into L2 (prefetcht1) and its packed slot for
  // writing (prefetchw, where the target has it) when that block is still to be packed, its packed
  // slot into L2 (prefetcht1) when it is packed already.
  TEST_CASE("target: the tiles run eight k steps a trip and spread the next block's prefetches") {
    for (std::string_view name : jit::target_names()) {
      const jit::CpuTarget& t = jit::cpu_target(name);
      INFO("target " << t.str());
      const Code f32 = code("matmul_f32", name), bf16 = code("matmul_bf16", name);
      const int tile_fmas = t.avx512 ? 16 : 12;
      CHECK(f32.count("vfmadd231ps", t.avx512 ? "zmm" : "ymm") >= 8 * tile_fmas);
      if (t.avx512_bf16 && !t.amx_bf16 && !t.bf16_on_fma) CHECK(bf16.count("vdpbf16ps", "zmm") >= 8 * 16);
      // Two lines a trip here (1024 lines over 1024 trips). A block to pack: the block's line and
      // its slot's, which lowers to prefetchw where the target has it (every AVX-512 target) and to
      // a second prefetcht1 elsewhere. A block packed already: its slot's line, prefetcht1 alone.
      if (t.avx512) CHECK(t.features.find("+prfchw") != std::string::npos);
      // The bf16 tiles the same, where they are not AMX tiles (which take the next block in one
      // burst after a packing).
      std::vector<const Code*> spreading = {&f32};
      if (!t.amx_bf16) spreading.push_back(&bf16);
      for (const Code* c : spreading) {
        if (t.features.find("+prfchw") != std::string::npos) {
          CHECK(c->count("prefetchw") >= 2);
          CHECK(c->count("prefetcht1") >= c->count("prefetchw") + 2);
        } else {
          CHECK(c->count("prefetchw") == 0);
          CHECK(c->count("prefetcht1") >= 6);
        }
      }
    }
  }

  // Every target this CPU runs, against the interpreter (the exact reference), on shapes that leave
  // row tails (m % 8, m % 6), column tails (n % 32, n % 16, masked) and odd k, storing the dot into
  // the ref and accumulating into it (dot_accumulate in place). The compiled dot sums with FMAs in
  // another order than the interpreter, so results agree within k units in the last place of the sum
  // of magnitudes, not bit for bit (README, "Backends").
  TEST_CASE("target: the dot micro-kernels agree with the interpreter on every runnable target, tails included") {
    struct Shape3 {
      int64_t m, k, n;
    };
    // {48, 64, 48} and {50, 70, 112} fill AMX tiles (2 x 2 and half blocks, k padded, row edges) on
    // a CPU that runs amx.
    const Shape3 shapes[] = {{1, 1, 1},    {5, 3, 7},      {6, 16, 64},  {13, 17, 70}, {7, 33, 129},
                             {130, 9, 65}, {12, 128, 200}, {48, 64, 48}, {50, 70, 112}};
    const std::pair<pl::DType, pl::DType> dtypes[] = {{pl::f32, pl::f32}, {pl::bf16, pl::bf16}, {pl::bf16, pl::f32}};
    auto store = [](pl::Ref x, pl::Ref y, pl::Ref, pl::Ref o) { o() = pl::dot(x(), y(), pl::f32); };
    auto accumulate = [](pl::Ref x, pl::Ref y, pl::Ref c, pl::Ref o) {
      o() = c();
      o() += pl::dot(x(), y(), pl::f32);
    };
    for (std::string_view name : jit::target_names()) {
      if (!jit::missing_on_host(jit::cpu_target(name)).empty()) continue;
      INFO("target " << std::string(name));
      for (const Shape3& s : shapes) {
        INFO("m, k, n = " << s.m << ", " << s.k << ", " << s.n);
        for (const auto& [lt, rt] : dtypes) {
          INFO("dtypes " << pl::dtype_name(lt) << " x " << pl::dtype_name(rt));
          const pl::Array x = pl::Array::random_normal({s.m, s.k}, lt, 3), y = pl::Array::random_normal({s.k, s.n}, rt, 4),
                          c = pl::Array::random_normal({s.m, s.n}, pl::f32, 5);
          for (bool acc : {false, true}) {
            INFO(std::string(acc ? "o() += dot" : "o() = dot"));
            pl::CallOptions compiled;
            compiled.compiler_params.target = std::string(name);
            auto run = [&](const pl::CallOptions& options) {
              return acc ? pl::pallas_call(accumulate, pl::GridSpec{}, pl::ShapeDtype({s.m, s.n}, pl::f32), options)(x, y, c)
                         : pl::pallas_call(store, pl::GridSpec{}, pl::ShapeDtype({s.m, s.n}, pl::f32), options)(x, y, c);
            };
            const double tolerance = 1e-6 * static_cast<double>(s.k + 1);
            CHECK(pl::allclose(run(compiled), run(testing::interpret()), tolerance, tolerance));
            // A bf16 x bf16 dot on FMAs (avx2, avx512, a native target with bf16_on_fma): each product
            // of two bf16 is exact in f32, so each FMA rounds once as each of the interpreter's k-order
            // sums does, and the dot is the interpreter's bit for bit (accumulated, the interpreter adds
            // the whole dot to the ref, the kernel each product).
            const jit::CpuTarget& t = jit::cpu_target(name);
            if (!acc && lt == pl::bf16 && rt == pl::bf16 && !t.amx_bf16 && (!t.avx512_bf16 || t.bf16_on_fma))
              CHECK(pl::allclose(run(compiled), run(testing::interpret()), 0, 0));
          }
        }
      }
    }
  }

  // The int8 dot (i8 x i8 -> i32) on every runnable target against the interpreter: integer sums are
  // exact, so the results must be equal, on shapes with row and column tails and k % 4 != 0 (the
  // vpdpbusd tile's partial last quad; on a target without VNNI, an odd k is the vpmaddwd tile's
  // partial last pair), operands spanning [-128, 127] with -128 at the corners, and
  // an accumulator near the i32 limits, so that accumulating wraps around.
  TEST_CASE("target: the int8 dot equals the interpreter's on every runnable target, tails included") {
    struct Shape3 {
      int64_t m, k, n;
    };
    // {48, 128, 48} and {50, 70, 112} fill AMX tiles on a CPU that runs amx.
    const Shape3 shapes[] = {{1, 1, 1},     {5, 3, 7},      {8, 4, 32},    {13, 17, 70}, {7, 33, 129},
                             {130, 9, 65}, {12, 130, 200}, {9, 6, 33},    {48, 128, 48}, {50, 70, 112}};
    auto store = [](pl::Ref x, pl::Ref y, pl::Ref, pl::Ref o) { o() = pl::dot(x(), y(), pl::i32); };
    auto accumulate = [](pl::Ref x, pl::Ref y, pl::Ref c, pl::Ref o) {
      o() = c();
      o() += pl::dot(x(), y(), pl::i32);
    };
    // Deterministic values covering the whole int8 range, -128 included.
    auto int8s = [](int64_t rows, int64_t cols, uint32_t seed) {
      std::vector<int8_t> v(static_cast<size_t>(rows * cols));
      uint32_t state = seed;
      for (auto& e : v) {
        state = state * 1664525u + 1013904223u;
        e = static_cast<int8_t>(state >> 24);
      }
      v.front() = v.back() = -128;
      return pl::Array::from_vector(v, {rows, cols});
    };
    for (std::string_view name : jit::target_names()) {
      if (!jit::missing_on_host(jit::cpu_target(name)).empty()) continue;
      INFO("target " << std::string(name));
      for (const Shape3& s : shapes) {
        INFO("m, k, n = " << s.m << ", " << s.k << ", " << s.n);
        const pl::Array x = int8s(s.m, s.k, 3), y = int8s(s.k, s.n, 4);
        std::vector<int32_t> cv(static_cast<size_t>(s.m * s.n));
        for (size_t e = 0; e < cv.size(); ++e)
          cv[e] = e % 2 ? std::numeric_limits<int32_t>::max() - static_cast<int32_t>(e)
                        : std::numeric_limits<int32_t>::min() + static_cast<int32_t>(e);
        const pl::Array c = pl::Array::from_vector(cv, {s.m, s.n});
        for (bool acc : {false, true}) {
          INFO(std::string(acc ? "o() += dot" : "o() = dot"));
          pl::CallOptions compiled;
          compiled.compiler_params.target = std::string(name);
          auto run = [&](const pl::CallOptions& options) {
            return acc ? pl::pallas_call(accumulate, pl::GridSpec{}, pl::ShapeDtype({s.m, s.n}, pl::i32), options)(x, y, c)
                       : pl::pallas_call(store, pl::GridSpec{}, pl::ShapeDtype({s.m, s.n}, pl::i32), options)(x, y, c);
          };
          CHECK(run(compiled).to_vector<int32_t>() == run(testing::interpret()).to_vector<int32_t>());
        }
      }
    }
  }
}
