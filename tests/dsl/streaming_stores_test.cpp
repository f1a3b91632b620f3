// Non-temporal stores (docs/design.md §5): compiled code writes an output array of at least 16 MiB
// one cache-line-wide vector at a time with non-temporal stores where each row starts on a line,
// and falls back to regular stores otherwise. The tests read the object code back with the
// disassembler and compare the results with the interpreter's.
#include <doctest/doctest.h>

#include <algorithm>

#include "jit/llvm/compiler.h"
#include "jit/llvm/disassembler.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }

// o = x + y over a rows x 1024 f32 array in 64 x 256 blocks (short rows: 1 KiB of every 4 KiB).
auto blocked_add(int64_t rows, const pl::CallOptions& options) {
  auto spec = pl::BlockSpec({64, 256}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); });
  return pl::pallas_call(add_kernel, pl::GridSpec{.grid = {rows / 64, 4}, .in_specs = {spec, spec}, .out_specs = {spec}},
                         pl::ShapeDtype({rows, 1024}, pl::f32), options);
}

int count(const std::vector<jit::Instruction>& code, std::string_view mnemonic, std::string_view operand) {
  return static_cast<int>(std::count_if(code.begin(), code.end(), [&](const jit::Instruction& i) {
    return i.mnemonic == mnemonic && i.text.find(operand) != std::string::npos;
  }));
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("streaming stores: a 16 MiB output is written with line-wide non-temporal stores, a 4 MiB one is not") {
    auto large = blocked_add(4096, {});
    auto small = blocked_add(1024, {});
    const pl::Array lx = pl::Array::zeros({4096, 1024}, pl::f32), sx = pl::Array::zeros({1024, 1024}, pl::f32);
    const std::vector<jit::Instruction> avx512 = jit::disassemble(jit::compile_object(large.lowered({lx, lx}), "avx512"));
    CHECK(count(avx512, "vmovntps", "zmmword ptr") > 0);
    const std::vector<jit::Instruction> avx2 = jit::disassemble(jit::compile_object(large.lowered({lx, lx}), "avx2"));
    CHECK(count(avx2, "vmovntps", "ymmword ptr") > 0);
    const std::vector<jit::Instruction> cached = jit::disassemble(jit::compile_object(small.lowered({sx, sx}), "avx512"));
    CHECK(count(cached, "vmovntps", "") == 0);
  }

  TEST_CASE("streaming stores: the results equal the interpreter's, on 1 and 2 threads") {
    const pl::Array x = pl::Array::random_normal({4096, 1024}, pl::f32, 5), y = pl::Array::random_normal({4096, 1024}, pl::f32, 6);
    const pl::Array want = blocked_add(4096, testing::interpret())(x, y);
    for (int threads : {1, 2}) {
      INFO(threads << " threads");
      pl::set_num_threads(threads);
      CHECK(pl::allclose(blocked_add(4096, {})(x, y), want, 0, 0));
    }
    pl::set_num_threads(0);
  }

  TEST_CASE("streaming stores: a block revisited over an arbitrary dim accumulates what the last visit streamed") {
    // o = 2 * sum over k of x's blocks, o 16 MiB: every visit reads the block the previous one wrote
    // with non-temporal stores.
    auto make = [](const pl::CallOptions& backend) { return testing::accumulate_over_k(64, 1024, 64, 3, backend); };
    const pl::Array x = pl::Array::random_normal({4096, 3072}, pl::f32, 8);
    const std::vector<pl::Array> want = make(testing::interpret())(x);
    for (int threads : {1, 2}) {
      INFO(threads << " threads");
      pl::set_num_threads(threads);
      CHECK(pl::allclose(make({})(x)[0], want[0], 0, 0));
    }
    pl::set_num_threads(0);
    CHECK(count(jit::disassemble(jit::compile_object(make({}).lowered({x}), "avx512")), "vmovntps", "zmmword ptr") > 0);
  }

  TEST_CASE("streaming stores: rows that do not start on a cache line take regular stores, with the same results") {
    // The kernel writes columns [1, 1009) of a 16 MiB output: every row starts 4 bytes past a line.
    auto kernel = [](pl::Ref x, pl::Ref o) {
      o() = pl::zeros_like(o);
      o.at(pl::all, pl::ds(1, 1008))() = x.at(pl::all, pl::ds(0, 1008))() * 2.0f;
    };
    auto make = [&](const pl::CallOptions& options) {
      return pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype({4096, 1024}, pl::f32), options);
    };
    const pl::Array x = pl::Array::random_normal({4096, 1024}, pl::f32, 7);
    const pl::Array got = make({})(x);
    CHECK(pl::allclose(got, make(testing::interpret())(x), 0, 0));
    CHECK(got.at<float>({4095, 1008}) == 2.0f * x.at<float>({4095, 1007}));
    CHECK(got.at<float>({17, 0}) == 0.0f);
  }

  // `o() = acc() + dot` into a 16 MiB output (megablox tgmm's group end): the micro-tiles stream C
  // as they finish (16 zmm non-temporal stores a tile, where a store of the sum after the dot has
  // one line-wide store in a loop) when the window's rows start on a line (column 16), and take
  // regular stores when they do not (column 1); 1000 columns end in a masked partial vector.
  TEST_CASE("streaming stores: a sum with a dot stored to a 16 MiB output is streamed by the dot's micro-tiles") {
    for (int64_t first : {16, 1}) {
      INFO("window from column " << first);
      auto kernel = [first](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
        acc() = pl::full(acc.shape(), 0.5, pl::f32) + pl::program_id(0).astype(pl::f32);
        o() = pl::zeros_like(o);
        o.at(pl::all, pl::ds(first, 1000))() = acc() + pl::dot(x(), y(), pl::f32);
      };
      auto make = [&](const pl::CallOptions& options) {
        const pl::GridSpec grid{
            .grid = {16},
            .in_specs = {pl::BlockSpec({256, 8}, [](pl::Value i) { return pl::idx(i, 0); }),
                         pl::BlockSpec({8, 1000}, [](pl::Value) { return pl::idx(0, 0); })},
            .out_specs = {pl::BlockSpec({256, 1024}, [](pl::Value i) { return pl::idx(i, 0); })},
            .scratch_shapes = {pl::VMEM({256, 1000}, pl::f32)}};
        return pl::pallas_call(kernel, grid, pl::ShapeDtype({4096, 1024}, pl::f32), options);
      };
      const pl::Array x = pl::Array::random_normal({4096, 8}, pl::f32, 9), y = pl::Array::random_normal({8, 1000}, pl::f32, 10);
      const pl::Array want = make(testing::interpret())(x, y);
      for (int threads : {1, 2}) {
        INFO(threads << " threads");
        pl::set_num_threads(threads);
        CHECK(pl::allclose(make({})(x, y), want, 1e-5, 1e-5));
      }
      pl::set_num_threads(0);
      if (first == 16) {
        const auto code = jit::disassemble(jit::compile_object(make({}).lowered({x, y}), "avx512"));
        CHECK(count(code, "vmovntps", "zmmword ptr") >= 16);
      }
    }
  }
}
