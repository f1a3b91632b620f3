#include <doctest/doctest.h>

#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "jit/lowering/canonicalize.h"
#include "jit/lowering/expand_pipelines.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

void matmul_kernel(pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
  pl::when(pl::program_id(2) == 0, [&] { acc() = pl::zeros_like(acc); });
  acc() += pl::dot(x(), y(), pl::f32);
  pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { o() = acc().astype(o.dtype()); });
}

auto matmul_call() {
  return pl::pallas_call(
      matmul_kernel,
      pl::GridSpec{.grid = {2, 2, 2},
                   .in_specs = {pl::BlockSpec({8, 16}, [](pl::Value i, pl::Value, pl::Value k) { return pl::idx(i, k); }),
                                pl::BlockSpec({16, 8}, [](pl::Value, pl::Value j, pl::Value k) { return pl::idx(k, j); })},
                   .out_specs = {pl::BlockSpec({8, 8}, [](pl::Value i, pl::Value j, pl::Value) { return pl::idx(i, j); })},
                   .scratch_shapes = {pl::VMEM({8, 8}, pl::f32)}},
      pl::ShapeDtype({16, 16}, pl::bf16),
      {.compiler_params = {.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary}}, .name = "matmul"});
}

// A gather by scalar prefetch with a squeezed block dim and an unwindowed (ANY) operand.
void gather_kernel(pl::Ref ids, pl::Ref x, pl::Ref raw, pl::Ref o) {
  (void)raw;
  o() = x() + pl::program_id(0).astype(pl::f32) + ids[pl::program_id(0)].astype(pl::f32);
}

auto gather_call() {
  return pl::pallas_call(
      gather_kernel,
      pl::PrefetchScalarGridSpec{
          .num_scalar_prefetch = 1,
          .grid = {4},
          .in_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i, pl::Ref ids) { return pl::idx(ids[i], 0); }),
                       pl::BlockSpec(pl::ANY)},
          .out_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i, pl::Ref) { return pl::idx(i, 0); })}},
      pl::ShapeDtype({4, 8}, pl::f32), {.name = "gather"});
}

std::vector<pl::Array> matmul_args() {
  return {pl::Array::zeros({16, 32}, pl::bf16), pl::Array::zeros({32, 16}, pl::bf16)};
}
std::vector<pl::Array> gather_args() {
  return {pl::Array::from_vector<int32_t>({2, 0, 3, 1}, {4}), pl::Array::zeros({4, 8}, pl::f32),
          pl::Array::zeros({3}, pl::f32)};
}

}  // namespace

TEST_SUITE("passes") {
  TEST_CASE("expand_pipelines: the tiled matmul (traced -> expanded golden IR)") {
    auto call = matmul_call();
    const ir::Function& traced = call.traced(matmul_args());
    testing::check_golden("matmul.traced.ir", ir::print(traced));
    ir::Function expanded = passes::expand_pipelines(traced);
    CHECK_NOTHROW(ir::verify(expanded));
    testing::check_golden("matmul.expanded.ir", ir::print(expanded));
    // After expansion no pipeline or grid query is left.
    for (const ir::Op& op : expanded.ops) {
      CHECK(op.kind != ir::OpKind::Pipeline);
      CHECK(op.kind != ir::OpKind::ProgramId);
      CHECK(op.kind != ir::OpKind::NumPrograms);
    }
  }

  TEST_CASE("expand_pipelines: scalar prefetch, squeezed dims and ANY operands (golden IR)") {
    auto call = gather_call();
    const ir::Function& traced = call.traced(gather_args());
    testing::check_golden("gather.traced.ir", ir::print(traced));
    ir::Function expanded = passes::canonicalize(passes::expand_pipelines(traced));
    CHECK_NOTHROW(ir::verify(expanded));
    testing::check_golden("gather.lowered.ir", ir::print(expanded));
  }

  TEST_CASE("expand_pipelines: inputs that are written or have edge blocks are copied, read-only ones read in place") {
    // x's blocks overhang its edge (10 rows, blocks of 4) and y is written by the kernel: both are
    // fetched into VMEM when their block index changes. z is only read and divides evenly: a view.
    auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref z, pl::Ref o) {
      y() = y() + 1.0f;
      o() = x() + y() + z();
    };
    auto spec = pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); });
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.grid = {3},
                                             .in_specs = {spec, pl::BlockSpec({4}, [](pl::Value) { return pl::idx(0); }),
                                                          pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i % 2); })},
                                             .out_specs = {spec}},
                                pl::ShapeDtype({10}, pl::f32), {.name = "copies"});
    std::vector<pl::Array> args{pl::Array::zeros({10}, pl::f32), pl::Array::zeros({4}, pl::f32),
                                pl::Array::zeros({8}, pl::f32)};
    std::string lowered = ir::print(call.lowered(args));
    testing::check_golden("copies.lowered.ir", lowered);
    CHECK(lowered.find("fetch_block \"input 0\"") != std::string::npos);
    CHECK(lowered.find("fetch_block \"input 1\"") != std::string::npos);
    CHECK(lowered.find("block_view \"input 2\"") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: the lowered IR is what the pass pipeline produces") {
    auto call = matmul_call();
    std::string lowered = ir::print(call.lowered(matmul_args()));
    testing::check_golden("matmul.lowered.ir", lowered);
    CHECK(lowered.find("block_view \"input 0\"") != std::string::npos);
    CHECK(lowered.find("writeback_block \"output 0\"") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: an emit_pipeline with a ring of block buffers (golden IR)") {
    // The input is written by the body, so it is copied through a ring of pl::Buffered(3) buffers
    // fetched two steps ahead; the output has two buffers written back asynchronously.
    auto kernel = [](pl::Ref x_hbm, pl::Ref o_hbm) {
      pl::emit_pipeline(
          [](pl::Ref x, pl::Ref o) {
            x() = x() * 2.0f;
            o() = x();
          },
          {.grid = {4},
           .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); }, pl::Buffered(3))},
           .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })}})(x_hbm, o_hbm);
    };
    auto call = pl::pallas_call(kernel,
                                pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                                pl::ShapeDtype({32}, pl::f32), {.name = "ring"});
    std::string lowered = ir::print(call.lowered({pl::Array::zeros({32}, pl::f32)}));
    testing::check_golden("ring.lowered.ir", lowered);
    CHECK(lowered.find("alloc \"emit_pipeline input 0 blocks\" : ref<3x8xf32, vmem>") != std::string::npos);
    CHECK(lowered.find("alloc \"emit_pipeline output 0 copies\" : ref<2xdma_sem, semaphore>") != std::string::npos);
    CHECK(lowered.find("pipeline_begin #1") != std::string::npos);
    CHECK(lowered.find("grid_point %") != std::string::npos);
  }

  TEST_CASE("expand_pipelines: an emit_pipeline input nothing writes is read in place, one written elsewhere is copied") {
    auto pipeline = [](pl::Ref src, pl::Ref dst) {
      pl::emit_pipeline([](pl::Ref x, pl::Ref o) { o() = x(); },
                        {.grid = {4},
                         .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                         .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })}})(src, dst);
    };
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o, pl::Ref tmp) {
          pipeline(x, tmp);  // x is an input: nothing writes it
          pipeline(tmp, o);  // tmp was written by the first pipeline
        },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY), pl::BlockSpec(pl::ANY)}},
        {pl::ShapeDtype({32}, pl::f32), pl::ShapeDtype({32}, pl::f32)}, {.name = "in_place"});
    std::string lowered = ir::print(call.lowered({pl::Array::zeros({32}, pl::f32)}));
    CHECK(lowered.find("block_view \"emit_pipeline input 0\" #1") != std::string::npos);
    CHECK(lowered.find("fetch_block \"emit_pipeline input 0\" #2") != std::string::npos);
  }
}
