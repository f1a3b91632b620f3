// The compiled backend on its own: cache keys, the memory and disk caches, the read-only fallback,
// logging, properties of the generated code, and failures inside compiled code. Kernels come as
// lowered IR text (golden files that dsl_tests checks the front end still lowers to, or a template
// here) and run through the runtime as a launch would run them. Caching across processes and the
// pallas_call side are tested in dsl_tests (compiled_test.cpp).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>

#include "jit/ir/parser.h"
#include "jit/ir/printer.h"
#include "jit/llvm/compiler.h"
#include "runtime/launch.h"
#include "tests/support/cache_dir.h"
#include "tests/support/capture.h"
#include "tests/support/golden.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

using Source = jit::CompiledKernel::Source;

// Parsed kernels live as long as the test binary: compiled code names ops of its IR when it calls
// into the runtime.
const ir::Function& keep(ir::Function fn) {
  static std::deque<ir::Function> kept;
  return kept.emplace_back(std::move(fn));
}

// o = x * factor over n f32 elements, lowered (one grid step, whole-array blocks).
const ir::Function& lowered_scale(float factor, int64_t n = 32) {
  return keep(ir::parse(fmt::format(R"(kernel @scale(%0 "input 0": ref<{n}xf32, any>, %1 "output 0": ref<{n}xf32, any>, %2 "first step": index, %3 "end step": index) {{
  %4 = constant 0 : i32
  %5 = constant {factor:.1f} : {n}xf32
  %6 = alloc "output 0 block" : ref<{n}xf32, vmem>
  %7 = constant 1 : index
  for %8: index = %2 to %3 step %7 {{
    grid_point
    %9 = block_view "input 0" %0 at [%4] : ref<{n}xf32, vmem>
    %10 = load %9 : {n}xf32
    %11 = mul %10, %5 : {n}xf32
    store %6, %11
    %12 = add %8, %7 : index
    %13 = eq %12, %3 : i1
    if %13 {{
      writeback_block "output 0" %6 -> %1 at [%4]
    }}
  }}
}}
)",
                                    fmt::arg("n", n), fmt::arg("factor", factor))));
}

const ir::Function& golden_kernel(const std::string& name) { return keep(ir::parse(testing::golden_text(name))); }

// Runs a compiled kernel as a launch does: grid steps [0, steps) split over `cores` cores (the grid
// is one parallel dim), each core with its own CoreContext on the runtime's thread pool; a core's
// failure is rethrown here.
void run(const ir::Function& lowered, const jit::CompiledKernel& kernel, std::vector<void*> operands, int64_t steps,
         int cores = 1) {
  rt::Launch launch(0, lowered.name);
  const std::vector<rt::StepRange> ranges = rt::split_steps({steps}, {ir::DimSemantics::Parallel}, cores);
  rt::run_cores(launch, cores, [&](int core) {
    const rt::StepRange range = ranges[core];
    if (range.lo >= range.hi) return;
    rt::CoreContext ctx(launch, core, &lowered);
    kernel.entry()(operands.data(), range.lo, range.hi, &ctx);
    ctx.dma.stop();
    if (ctx.fault) throw *ctx.fault;
  });
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("jit: the cache key follows the IR, and only the IR") {
    const std::string a = jit::cache_key(lowered_scale(2.0f));
    CHECK(a.size() == 32);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(jit::cache_key(lowered_scale(2.0f)) == a);
    CHECK(jit::cache_key(lowered_scale(3.0f)) != a);
    CHECK(jit::cache_key(lowered_scale(2.0f, 64)) != a);
    CHECK(!jit::host_target().empty());
  }

  TEST_CASE("jit: the cache key covers the order ops are stored in, which compiled code refers to") {
    // Two functions that print alike but store two ops the other way round: compiled code passes op
    // indices to the runtime, so one object must not serve both.
    const ir::Function& original = lowered_scale(2.0f);
    ir::Function swapped = original;
    const ir::Region& body = swapped.regions.at(swapped.body);
    REQUIRE(body.ops.size() >= 2);
    const ir::OpId a = body.ops[0], b = body.ops[1];
    std::swap(swapped.ops[a], swapped.ops[b]);
    for (ir::Region& r : swapped.regions) {
      for (ir::OpId& id : r.ops) id = id == a ? b : id == b ? a : id;
      if (r.parent_op == a || r.parent_op == b) r.parent_op = r.parent_op == a ? b : a;
    }
    for (ir::ValueInfo& v : swapped.values)
      if (v.def == a || v.def == b) v.def = v.def == a ? b : a;
    CHECK(ir::print(swapped) == ir::print(original));
    CHECK(jit::cache_key(swapped) != jit::cache_key(original));
  }

  TEST_CASE("jit: a live kernel is found in memory, a dropped one on disk, none with the cache off") {
    testing::CacheDir dir("memory_disk");
    const ir::Function& fn = lowered_scale(5.0f);
    auto first = jit::compile(fn);
    CHECK(first->source() == Source::Compiled);
    CHECK(fs::exists(dir.path() / (first->key() + ".o")));
    auto second = jit::compile(fn);
    CHECK(second->source() == Source::MemoryCache);
    CHECK(reinterpret_cast<void*>(second->entry()) == reinterpret_cast<void*>(first->entry()));
    const std::string key = first->key();
    first.reset();
    second.reset();  // unloaded now
    auto third = jit::compile(fn);
    CHECK(third->source() == Source::DiskCache);
    // The kernel loaded from disk runs.
    std::vector<float> x(32), o(32);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    run(fn, *third, {x.data(), o.data()}, 1);
    CHECK(o[7] == 35.0f);
    third.reset();
    setenv("TESSERA_CACHE", "0", 1);
    auto fourth = jit::compile(fn);
    unsetenv("TESSERA_CACHE");
    CHECK(fourth->source() == Source::Compiled);
  }

  TEST_CASE("jit: an unwritable cache directory degrades to no disk cache, and a corrupt object to a recompile") {
    {
      testing::CacheDir dir("readonly");
      fs::create_directories(dir.path().parent_path());
      std::ofstream(dir.path()) << "a file where the directory should be";
      const std::string log = testing::capture_stderr([] {
        setenv("TESSERA_LOG", "cache", 1);
        auto k = jit::compile(lowered_scale(7.0f));
        unsetenv("TESSERA_LOG");
        CHECK(k->source() == Source::Compiled);
        CHECK(reinterpret_cast<void*>(k->entry()) != nullptr);
      });
      CHECK(log.find("compiled kernels are kept in memory only") != std::string::npos);
      fs::remove(dir.path());
    }
    {
      testing::CacheDir dir("corrupt");
      const ir::Function& fn = lowered_scale(11.0f);
      std::string key = jit::cache_key(fn);
      fs::create_directories(dir.path());
      std::ofstream(dir.path() / (key + ".o")) << "not an object file";
      auto k = jit::compile(fn);
      CHECK(k->source() == Source::Compiled);
      k.reset();
      CHECK(jit::compile(fn)->source() == Source::DiskCache);  // the rewritten object loads
    }
  }

  TEST_CASE("jit: acc() += dot(...) runs the FMA micro-kernel, element-wise chains fuse into one loop") {
    const ir::Function& dot = golden_kernel("dot_accumulate.lowered.ir");
    const ir::Function& chain = golden_kernel("elementwise_chain.lowered.ir");
    setenv("TESSERA_CACHE", "0", 1);
    setenv("TESSERA_DUMP_LLVM", "1", 1);
    std::shared_ptr<const jit::CompiledKernel> dot_kernel;
    const std::string dot_llvm = testing::capture_stderr([&] { dot_kernel = jit::compile(dot); });
    const std::string chain_llvm = testing::capture_stderr([&] { jit::compile(chain); });
    unsetenv("TESSERA_DUMP_LLVM");
    unsetenv("TESSERA_CACHE");
    // The micro-kernel's vectors have the target's width (zmm on AVX-512 targets, else ymm).
    const bool zmm = jit::select_target("").avx512;
    CHECK(dot_llvm.find(zmm ? "@llvm.fma.v16f32" : "@llvm.fma.v8f32") != std::string::npos);
    // The dot accumulates into the scratch: its only temporaries are the packed operands.
    CHECK(chain_llvm.find("call ptr @tessera_rt_temp") == std::string::npos);  // no block materialised
    // The chain's exp is tessera's own (runtime/element_math.h), inline and widened by the loop
    // vectoriser like the rest of the chain, never a call of libm's expf.
    CHECK(chain_llvm.find("@expf") == std::string::npos);
    CHECK(chain_llvm.find(zmm ? "@llvm.fma.v16f32" : "@llvm.fma.v8f32") != std::string::npos);
    // The micro-kernel computes the product: rows of ones times columns of twos.
    std::vector<float> x(32 * 32, 1.0f), y(32 * 32, 2.0f), o(32 * 32);
    run(dot, *dot_kernel, {x.data(), y.data(), o.data()}, 1);
    CHECK(o[0] == 64.0f);
    CHECK(o[32 * 32 - 1] == 64.0f);
  }

  TEST_CASE("jit: index arithmetic used twice is recomputed at each use, not filled into a buffer") {
    // A row mask as kernels write it, `lo <= iota + offset < hi` (the offset a run-time value, the
    // grid step): the sum feeds both comparisons, and a value used twice is otherwise computed once
    // into a temporary block.
    const ir::Function& masked = keep(ir::parse(R"(kernel @row_mask(%0 "input 0": ref<8x16xf32, any>, %1 "output 0": ref<8x16xf32, any>, %2 "first step": index, %3 "end step": index) {
  %4 = constant 0 : i64
  %5 = constant 2 : i32
  %6 = constant 6 : i32
  %7 = constant 0.0 : 8x16xf32
  %8 = constant 1 : index
  for %9: index = %2 to %3 step %8 {
    grid_point
    %10 = block_view "input 0" %0 at [%4, %4] : ref<8x16xf32, vmem>
    %11 = block_view "output 0" %1 at [%4, %4] : ref<8x16xf32, vmem>
    %12 = load %10 : 8x16xf32
    %13 = cast %9 : i32
    %14 = iota axis=0 : 8x16xi32
    %15 = broadcast_to %13 : 8x16xi32
    %16 = add %14, %15 : 8x16xi32
    %17 = broadcast_to %5 : 8x16xi32
    %18 = ge %16, %17 : 8x16xi1
    %19 = broadcast_to %6 : 8x16xi32
    %20 = lt %16, %19 : 8x16xi1
    %21 = and %18, %20 : 8x16xi1
    %22 = select %21, %12, %7 : 8x16xf32
    store %11, %22
    %23 = add %9, %8 : index
    %24 = eq %23, %3 : i1
    if %24 {
      writeback_block "output 0" %11 -> %1 at [%4, %4]
    }
  }
}
)"));
    setenv("TESSERA_CACHE", "0", 1);
    setenv("TESSERA_DUMP_LLVM", "1", 1);
    std::shared_ptr<const jit::CompiledKernel> kernel;
    const std::string llvm_text = testing::capture_stderr([&] { kernel = jit::compile(masked); });
    unsetenv("TESSERA_DUMP_LLVM");
    unsetenv("TESSERA_CACHE");
    CHECK(llvm_text.find("call ptr @tessera_rt_temp") == std::string::npos);  // no block materialised
    // Two steps, the last one's rows kept: 2 <= row + 1 < 6.
    std::vector<float> x(8 * 16), o(8 * 16, -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
    run(masked, *kernel, {x.data(), o.data()}, 2);
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        CAPTURE(r);
        CHECK(o[r * 16 + c] == (r >= 1 && r < 5 ? x[r * 16 + c] : 0.0f));
      }
  }

  TEST_CASE("jit: a failure in compiled code stops the other cores and comes back as a RuntimeError") {
    // Every step of core 1 (steps 4..7) slices its input out of bounds; core 0 has valid steps.
    // A cache of its own: compiled code names ops by their index in the Function, and the parsed
    // kernel numbers its ops in text order, unlike the passes that made the same text in dsl_tests
    // (which share the build tree's cache and key objects by the text alone).
    testing::CacheDir dir("out_of_bounds");
    const ir::Function& fn = golden_kernel("out_of_bounds.lowered.ir");
    auto kernel = jit::compile(fn);
    std::vector<float> x(8), o(32);
    try {
      run(fn, *kernel, {x.data(), o.data()}, 8, /*cores=*/2);
      FAIL("expected a RuntimeError");
    } catch (const RuntimeError& e) {
      CHECK(e.where().core == 1);
      CHECK(e.where().grid_point == std::vector<int64_t>{4});
      CHECK(std::string(e.what()).find("out-of-bounds slice of `input 0 block`: ds(100, 4)") != std::string::npos);
    }
    // The process and later launches are unaffected.
    const ir::Function& scale = lowered_scale(3.0f, 8);
    std::vector<float> in{0, 1, 2, 3, 4, 5, 6, 7}, out(8);
    run(scale, *jit::compile(scale), {in.data(), out.data()}, 1);
    CHECK(out[7] == 21.0f);
  }
}
