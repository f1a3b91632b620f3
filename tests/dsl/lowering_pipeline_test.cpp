// The front end's half of the golden IR chain: kernels written with the DSL trace (and lower) to the
// golden files that lowering_tests and llvm_tests start from, so DSL -> traced golden -> pass ->
// lowered golden -> code stays covered while those suites link only their own layer. Also the
// pallas_call side of the pass pipeline: its VMEM limit and IR dumps.
#include <doctest/doctest.h>

#include <cstdlib>

#include "jit/ir/printer.h"
#include "tests/support/golden.h"
#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;

namespace {

// Options naming the kernel, with grid dimension semantics. (Set field by field: GCC 12 warns that
// the nested designated initialisers may leave the semantics uninitialised.)
pl::CallOptions named(std::string name, std::vector<pl::DimensionSemantics> semantics = {}) {
  pl::CallOptions options;
  options.name = std::move(name);
  options.compiler_params.dimension_semantics = std::move(semantics);
  return options;
}

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
      named("matmul", {pl::parallel, pl::parallel, pl::arbitrary}));
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
      pl::ShapeDtype({4, 8}, pl::f32), named("gather"));
}

std::vector<pl::Array> matmul_args() {
  return {pl::Array::zeros({16, 32}, pl::bf16), pl::Array::zeros({32, 16}, pl::bf16)};
}
std::vector<pl::Array> gather_args() {
  return {pl::Array::from_vector<int32_t>({2, 0, 3, 1}, {4}), pl::Array::zeros({4, 8}, pl::f32),
          pl::Array::zeros({3}, pl::f32)};
}

// The kernel writes its input block, so the pipeline copies it into VMEM (three VMEM buffers).
void copy_kernel(pl::Ref x, pl::Ref o, pl::Ref scratch) {
  x() = x() * 2.0f;
  scratch() = x();
  o() = scratch();
}

auto copy_call(int64_t block, std::optional<int64_t> vmem_limit = std::nullopt) {
  auto spec = pl::BlockSpec({block, block}, [](pl::Value i) { return pl::idx(i, 0); });
  pl::CallOptions options;
  options.compiler_params.vmem_limit_bytes = vmem_limit;
  options.name = "copy";
  return pl::pallas_call(copy_kernel,
                         pl::GridSpec{.grid = {1}, .in_specs = {spec}, .out_specs = {spec},
                                      .scratch_shapes = {pl::VMEM({block, block}, pl::f32)}},
                         pl::ShapeDtype({block, block}, pl::f32), options);
}


}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("lowering pipeline: the tiled matmul traces and lowers to its golden IR") {
    auto call = matmul_call();
    testing::check_golden("matmul.traced.ir", ir::print(call.traced(matmul_args())));
    testing::check_golden("matmul.lowered.ir", ir::print(call.lowered(matmul_args())));
  }

  TEST_CASE("lowering pipeline: scalar prefetch, squeezed dims and ANY operands trace to their golden IR") {
    testing::check_golden("gather.traced.ir", ir::print(gather_call().traced(gather_args())));
  }

  TEST_CASE("lowering pipeline: inputs written by the kernel, edge blocks and read-only inputs (golden IR)") {
    // x's blocks overhang its edge (10 rows, blocks of 4) and y is written by the kernel; z is only
    // read and divides evenly.
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
                                pl::ShapeDtype({10}, pl::f32), named("copies"));
    std::vector<pl::Array> args{pl::Array::zeros({10}, pl::f32), pl::Array::zeros({4}, pl::f32),
                                pl::Array::zeros({8}, pl::f32)};
    testing::check_golden("copies.traced.ir", ir::print(call.traced(args)));
    testing::check_golden("copies.lowered.ir", ir::print(call.lowered(args)));
  }

  TEST_CASE("lowering pipeline: an emit_pipeline with a ring of block buffers (golden IR)") {
    // The input is written by the body, so it is copied through a ring of pl::Buffered(3) buffers;
    // the output has two buffers written back asynchronously.
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
                                pl::ShapeDtype({32}, pl::f32), named("ring"));
    const std::vector<pl::Array> args{pl::Array::zeros({32}, pl::f32)};
    testing::check_golden("ring.traced.ir", ir::print(call.traced(args)));
    testing::check_golden("ring.lowered.ir", ir::print(call.lowered(args)));
  }

  TEST_CASE("lowering pipeline: two emit_pipelines, the second over what the first wrote (golden IR)") {
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
        {pl::ShapeDtype({32}, pl::f32), pl::ShapeDtype({32}, pl::f32)}, named("in_place"));
    testing::check_golden("in_place.traced.ir", ir::print(call.traced({pl::Array::zeros({32}, pl::f32)})));
  }

  TEST_CASE("lowering pipeline: a kernel whose input block is copied traces to its golden IR") {
    testing::check_golden("copy.traced.ir", ir::print(copy_call(8).traced({pl::Array::zeros({8, 8}, pl::f32)})));
  }

  TEST_CASE("lowering pipeline: CompilerParams::vmem_limit_bytes reaches the VMEM budget check") {
    pl::Array x = pl::Array::zeros({256, 256}, pl::f32);
    CHECK_NOTHROW(copy_call(256)(x));
    auto small = copy_call(256, /*vmem_limit=*/512 * 1024);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("kernel `copy` needs more VMEM per core than it may use"), UserError);
    CHECK_THROWS_WITH_AS(small(x), doctest::Contains("0.75 MiB of VMEM buffers against a limit of 0.50 MiB"), UserError);
    // The default limit is 64 MiB: a 4096 x 4096 f32 block (64 MiB) plus its scratch does not fit.
    auto big = copy_call(4096);
    CHECK_THROWS_WITH_AS(big(pl::Array::zeros({4096, 4096}, pl::f32)), doctest::Contains("against a limit of 64.00 MiB"),
                         UserError);
  }

  TEST_CASE("lowering pipeline: TESSERA_DUMP_IR prints what a pallas_call traces and lowers") {
    pl::Array x = pl::Array::zeros({8, 8}, pl::f32);
    setenv("TESSERA_DUMP_IR", "all", 1);
    const std::string all = testing::capture_stderr([&] { copy_call(8)(x); });
    unsetenv("TESSERA_DUMP_IR");
    CHECK(all.find("// ---- tessera IR of `copy` as traced ----\n" + ir::print(copy_call(8).traced({x}))) !=
          std::string::npos);
    CHECK(all.find("// ---- tessera IR of `copy` after check_vmem_budget ----\n" + ir::print(copy_call(8).lowered({x}))) !=
          std::string::npos);
  }

  TEST_CASE("lowering pipeline: the kernels the code generator tests compile lower to their golden IR") {
    // acc() += dot(...) into a scratch accumulator (the FMA micro-kernel).
    auto dot = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref acc) {
          acc() = pl::zeros_like(acc);
          acc() += pl::dot(x(), y(), pl::f32);
          o() = acc();
        },
        pl::GridSpec{.scratch_shapes = {pl::VMEM({32, 32}, pl::f32)}}, pl::ShapeDtype({32, 32}, pl::f32),
        named("dot_accumulate"));
    testing::check_golden("dot_accumulate.lowered.ir",
                          ir::print(dot.lowered({pl::Array::zeros({32, 32}, pl::f32), pl::Array::zeros({32, 32}, pl::f32)})));
    // An element-wise chain (one fused loop).
    auto chain = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = pl::exp(x()) * 2.0f + y() - 1.0f; },
                                 pl::GridSpec{}, pl::ShapeDtype({8, 128}, pl::f32), named("elementwise_chain"));
    testing::check_golden("elementwise_chain.lowered.ir",
                          ir::print(chain.lowered({pl::Array::zeros({8, 128}, pl::f32), pl::Array::zeros({8, 128}, pl::f32)})));
    // A slice that is out of bounds from grid step 4 on.
    auto oob = pl::pallas_call(
        [](pl::Ref x, pl::Ref o) { o() = x(pl::ds(pl::program_id(0) * 0 + pl::program_id(0) / 4 * 100, 4)); },
        pl::GridSpec{.grid = {8}, .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}},
        pl::ShapeDtype({32}, pl::f32), named("out_of_bounds", {pl::parallel}));
    testing::check_golden("out_of_bounds.lowered.ir", ir::print(oob.lowered({pl::Array::zeros({8}, pl::f32)})));
  }
}
