// Every user-facing error of the front end: its type, and a message that says what is wrong, what
// was given, how to fix it, and where.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;

namespace {

// Traces `kernel` over one f32 input of `shape` with whole-array blocks and runs it.
void trace1(const std::function<void(pl::Ref, pl::Ref)>& kernel, pl::Shape shape = {8, 8}, pl::DType dtype = pl::f32) {
  pl::pallas_call(kernel, pl::GridSpec{}, pl::ShapeDtype(shape, dtype), testing::interpret())(pl::Array::zeros(shape, dtype));
}

void copy_kernel(pl::Ref x, pl::Ref o) { o() = x(); }

pl::BlockSpec row_spec() {
  return pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); });
}

}  // namespace

TEST_SUITE("errors") {
  TEST_CASE("errors: messages have what, given, fix and the user's line") {
    int line = 0;
    try {
      trace1([&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o() = x() + pl::zeros({3}, pl::f32);
      });
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem() == "operator+: operand shapes do not broadcast");
      CHECK(e.given() == "a (8, 8) block of f32 and a (3,) block of f32");
      CHECK(e.fix().find("numpy broadcasting") != std::string::npos);
      CHECK(e.loc().line == static_cast<uint32_t>(line));
      CHECK(std::string(e.what()).find(fmt::format("errors_test.cpp:{}", line)) != std::string::npos);
      CHECK(std::string(e.what()).find("\n  given: ") != std::string::npos);
      CHECK(std::string(e.what()).find("\n  fix:   ") != std::string::npos);
    }
  }

  TEST_CASE("errors: DSL calls outside a kernel") {
    CHECK_THROWS_WITH_AS(pl::program_id(0), Contains("pl::program_id was called while no kernel is being traced"), UserError);
    CHECK_THROWS_WITH_AS(pl::zeros({2}, pl::f32), Contains("no kernel is being traced"), UserError);
  }

  TEST_CASE("errors: grid queries") {
    auto kernel = [](pl::Ref o) { o() = pl::program_id(2).astype(pl::f32) + pl::zeros_like(o); };
    auto call = pl::pallas_call(kernel, pl::GridSpec{.grid = {2, 2}}, pl::ShapeDtype({1}, pl::f32));
    CHECK_THROWS_WITH_AS(call(), Contains("pl::program_id: axis 2 is out of range for the grid"), UserError);
    CHECK_THROWS_WITH_AS(call(), Contains("a grid of 2 dims ((2, 2))"), UserError);
    auto none = pl::pallas_call([](pl::Ref o) { o() = pl::num_programs(0).astype(pl::f32) + pl::zeros_like(o); }, pl::GridSpec{},
                                pl::ShapeDtype({1}, pl::f32));
    CHECK_THROWS_WITH_AS(none(), Contains("this grid has no axes"), UserError);
  }

  TEST_CASE("errors: loads and stores by memory space") {
    auto from_any = [](pl::Ref x, pl::Ref o) { o() = x(); };
    auto call = pl::pallas_call(from_any, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}}, pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(call(pl::Array::zeros({4}, pl::f32)), Contains("cannot load from a ref in memory space ANY"), UserError);
    CHECK_THROWS_WITH_AS(call(pl::Array::zeros({4}, pl::f32)), Contains("reachable only by DMA"), UserError);
    auto to_any = [](pl::Ref x, pl::Ref o) { o() = x(); };
    auto call2 = pl::pallas_call(to_any, pl::GridSpec{.out_specs = {pl::BlockSpec(pl::HBM)}}, pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(call2(pl::Array::zeros({4}, pl::f32)), Contains("memory space HBM"), UserError);
    auto smem_block = [](pl::Ref t, pl::Ref o) { o() = t().astype(pl::f32); };
    auto call3 = pl::pallas_call(smem_block, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::SMEM)}}, pl::ShapeDtype({4}, pl::f32));
    CHECK_THROWS_WITH_AS(call3(pl::Array::zeros({4}, pl::i32)), Contains("cannot load from a block in SMEM: SMEM holds scalars only"),
                         UserError);
  }

  TEST_CASE("errors: stores must match the window") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x().astype(pl::bf16); }),
                         Contains("the stored value's dtype differs from the ref's"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x().astype(pl::bf16); }), Contains(".astype(pl::f32)"),
                         UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(pl::ds(0, 4)) = x(); }),
                         Contains("the stored value's shape differs from the ref window's"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x() + 0 * 1.5; }, {8, 8}, pl::i32),
                         Contains("the stored value's dtype differs"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref, pl::Ref o) { o() = 1.5; }, {8}, pl::i32),
                         Contains("storing a float literal into an integer ref"), UserError);
  }

  TEST_CASE("errors: indexing refs") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x(0, 0, 0); }), Contains("too many indices for the ref"),
                         UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(pl::ds(6, 4), 0); }),
                         Contains("a static index or slice is out of bounds"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(pl::ds(6, 4), 0); }),
                         Contains("ds(6, 4) reaches element 9 of dim 0, which has 8 elements"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(pl::ds(0, 4, 0), 0); }),
                         Contains("pl::ds needs a size >= 0 and a stride >= 1"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(-1); }), Contains("out of bounds"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(pl::ds(x(0, 0), 8), 0); }),
                         Contains("a ref index must be an integer scalar"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = x(pl::ds(0.5, 8), 0); }),
                         Contains("a ref index must be an integer"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { pl::store(o, x(), x()); }), Contains("a mask must be bool"),
                         UserError);
  }

  TEST_CASE("errors: operand types of arithmetic and logic") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = (x() & 1).astype(pl::f32); }),
                         Contains("operator& needs bool or integer operands"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = ((x() > 0) + (x() > 1)).astype(pl::f32); }),
                         Contains("operator+ needs numeric operands, not bool"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = (x() && x()).astype(pl::f32); }),
                         Contains("operator&& needs bool operands"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = (~x()); }), Contains("operator~ needs a bool or integer operand"),
                         UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = (-(x() > 0)).astype(pl::f32); }),
                         Contains("negation needs a numeric operand, not bool"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::abs(x() > 0).astype(pl::f32); }),
                         Contains("pl::abs needs a numeric operand"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::where(x(), x(), x()); }),
                         Contains("pl::where needs a bool condition"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::where(pl::zeros({3}, pl::bool_), x(), x()); }),
                         Contains("pl::where: the condition and the values do not broadcast"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::floor_divide(x() > 0, x() > 0).astype(pl::f32); }),
                         Contains("pl::floor_divide needs numeric operands"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::mod(x() > 0, x() > 0).astype(pl::f32); }),
                         Contains("pl::mod needs numeric operands"), UserError);
  }

  TEST_CASE("errors: shapes of layout ops, constructors and reductions") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::reshape(x(), {3, 3}); }),
                         Contains("pl::reshape: the new shape has a different number of elements"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::transpose(x(), {0, 0}); }),
                         Contains("pl::transpose: perm must list every dim exactly once"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::swapaxes(x(), 0, 2); }),
                         Contains("pl::swapaxes: axis out of range"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::broadcast_to(x(), {8, 4}); }),
                         Contains("pl::broadcast_to: cannot broadcast a (8, 8) block of f32 to shape (8, 4)"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x() + pl::iota({8, 8}, 2, pl::f32); }),
                         Contains("pl::iota: the dimension must be one of the shape's dims"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x() + pl::iota({8, 8}, 0, pl::bool_).astype(pl::f32); }),
                         Contains("pl::iota: the dtype must be numeric"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x() + pl::full({-1}, 0, pl::f32); }),
                         Contains("pl::full: shape dims must be >= 0"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0) = pl::sum(x(), 2); }), Contains("pl::sum: axis out of range"),
                         UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o(0, 0) = pl::max(x(), {0, 0}); }),
                         Contains("pl::max: an axis is listed twice"), UserError);
  }

  TEST_CASE("errors: dot and dot_general") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot(x(), pl::zeros({4, 8}, pl::f32)); }),
                         Contains("pl::dot: the contracting dims differ in size"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot(x(), pl::zeros({4, 8}, pl::f32)); }),
                         Contains("dim 1 of a has 8 elements, dim 0 of b has 4"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = x() * pl::dot(x(0, 0), x(0, 0)); }),
                         Contains("pl::dot needs operands of rank >= 1"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot_general(x(), x(), {{{1}, {}}, {{}, {}}}); }),
                         Contains("dimension lists have different lengths"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot_general(x(), x(), {{{2}, {0}}, {{}, {}}}); }),
                         Contains("lhs dimension 2 is out of range or repeated"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot_general(x(), x(), {{{1}, {1}}, {{0}, {1}}}); }),
                         Contains("rhs dimension 1 is out of range or repeated"), UserError);
    CHECK_THROWS_WITH_AS(
        trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot_general(x(), pl::zeros({4, 8}, pl::f32), {{{1}, {0}}, {{}, {}}}); }),
        Contains("contracting dims differ in size: lhs dim 1 has 8, rhs dim 0 has 4"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { o() = pl::dot_general(x(), x() > 0, {{{1}, {0}}, {{}, {}}}); }),
                         Contains("operands must be numeric"), UserError);
    CHECK_THROWS_WITH_AS(
        trace1([](pl::Ref x, pl::Ref o) { o(0) = pl::dot_general(x(), pl::zeros({4, 8}, pl::f32), {{{1}, {1}}, {{0}, {0}}}); }),
        Contains("batch dims differ in size"), UserError);
  }

  TEST_CASE("errors: control flow") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) { pl::when(x(0, 0), [&] { o() = x(); }); }),
                         Contains("pl::when needs a bool scalar condition"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::cond(x(0, 0) > 0, [&] { return x(); }, [&] { return x().astype(pl::bf16); }).astype(pl::f32);
                         }),
                         Contains("pl::cond: the branches return different types"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = pl::fori_loop(0, 3, x(), [&](pl::Value, pl::Value a) { return pl::sum(a); });
                         }),
                         Contains("pl::fori_loop: the body returns a carry of another type than the initial one"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = x();
                           pl::loop(0, 3, [&](pl::Value) {}, 0);
                         }),
                         Contains("pl::loop: the step must be positive"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = x();
                           pl::loop(0.5, 3, [&](pl::Value) {});
                         }),
                         Contains("pl::loop: bounds must be integer scalars"), UserError);
  }

  TEST_CASE("errors: a value made inside a branch or loop and used outside") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           pl::Value inner;
                           pl::when(x(0, 0) > 0, [&] { inner = x() * 2.0f; });
                           o() = inner;
                         }),
                         Contains("a value defined inside a pl::when body is used outside of it"), UserError);
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           pl::Value inner;
                           pl::loop(0, 2, [&](pl::Value i) { inner = i; });
                           o(0) = inner.astype(pl::f32) + x(0);
                         }),
                         Contains("a loop body"), UserError);
  }

  TEST_CASE("errors: values and refs outlive their trace") {
    pl::Value leaked;
    trace1([&](pl::Ref x, pl::Ref o) {
      leaked = x();
      o() = x();
    });
    CHECK_THROWS_WITH_AS(trace1([&](pl::Ref, pl::Ref o) { o() = leaked; }),
                         Contains("a value from another kernel's trace"), UserError);
    pl::Value empty;
    CHECK_THROWS_WITH_AS(empty.dtype(), Contains("an empty pl::Value is used"), UserError);
    CHECK_THROWS_WITH_AS(trace1([&](pl::Ref, pl::Ref o) { o() = empty; }), Contains("an empty pl::Value is used"), UserError);
    pl::Ref kept;
    trace1([&](pl::Ref x, pl::Ref o) {
      kept = x;
      o() = x();
    });
    CHECK_THROWS_WITH_AS(trace1([&](pl::Ref, pl::Ref o) { o() = kept(); }),
                         Contains("a ref from another kernel's trace (or an empty pl::Ref) is used"), UserError);
    pl::Ref none;
    CHECK_THROWS_WITH_AS(none.shape(), Contains("an empty pl::Ref is used"), UserError);
  }

  TEST_CASE("errors: debug_print placeholders") {
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = x();
                           pl::debug_print("{} and {}", x(0, 0));
                         }),
                         Contains("the number of {} placeholders differs from the number of values"), UserError);
    // Pallas takes bare {} fields only: no names, indices, format specs or conversions.
    for (const char* field : {"{:.2f}", "{0}", "{x}", "{!r}"}) {
      CHECK_THROWS_WITH_AS(trace1([&](pl::Ref x, pl::Ref o) {
                             o() = x();
                             pl::debug_print(std::string("x = ") + field, x(0, 0));
                           }),
                           Contains(fmt::format("pl::debug_print: the format has a field other than `{{}}`\n  given: \"x = {}\": "
                                                "the field `{}` names, indexes, formats or converts its value",
                                                field, field)
                                        .c_str()),
                           UserError);
    }
    CHECK_THROWS_WITH_AS(trace1([](pl::Ref x, pl::Ref o) {
                           o() = x();
                           pl::debug_print("x = {", x(0, 0));
                         }),
                         Contains("a `{` at offset 4 opens a field that never closes"), UserError);
  }

  TEST_CASE("errors: pallas_call arity, specs and grid") {
    pl::Array x = pl::Array::zeros({16}, pl::f32);
    auto two_specs = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}, .in_specs = {row_spec(), row_spec()}},
                                     pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(two_specs(x), Contains("the number of in_specs differs from the number of inputs"), UserError);
    auto out_specs = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}, .out_specs = {row_spec(), row_spec()}},
                                     pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(out_specs(x), Contains("the number of out_specs differs"), UserError);
    auto three = pl::pallas_call([](pl::Ref, pl::Ref, pl::Ref) {}, pl::GridSpec{}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(three(x), Contains("the kernel takes a different number of refs than the call provides"), UserError);
    CHECK_THROWS_WITH_AS(three(x), Contains("a kernel of 3 pl::Ref parameter(s); the call provides 2"), UserError);
    auto negative = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {-1}}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(negative(x), Contains("grid dims must be >= 0"), UserError);
    auto sem = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}}, pl::ShapeDtype({16}, pl::f32),
                               {.compiler_params = {.dimension_semantics = {pl::parallel, pl::parallel}}});
    CHECK_THROWS_WITH_AS(sem(x), Contains("dimension_semantics must have one entry per grid dim"), UserError);
    auto prefix = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2, 2}}, pl::ShapeDtype({16}, pl::f32),
                                  {.compiler_params = {.dimension_semantics = {pl::arbitrary, pl::parallel}}});
    CHECK_THROWS_WITH_AS(prefix(x), Contains("parallel grid dims must come before arbitrary ones"), UserError);
    auto vmem = pl::pallas_call(copy_kernel, pl::GridSpec{}, pl::ShapeDtype({16}, pl::f32),
                                {.compiler_params = {.vmem_limit_bytes = 0}});
    CHECK_THROWS_WITH_AS(vmem(x), Contains("vmem_limit_bytes must be positive"), UserError);
    auto cores = pl::pallas_call(copy_kernel, pl::GridSpec{}, pl::ShapeDtype({16}, pl::f32),
                                 {.interpret = pl::InterpretParams{.num_cores_or_threads = 0}});
    CHECK_THROWS_WITH_AS(cores(x), Contains("num_cores_or_threads must be >= 1"), UserError);
    auto prefetch = pl::pallas_call(copy_kernel, pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 2}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(prefetch(x), Contains("fewer arguments than scalar-prefetch operands"), UserError);
    auto negative_prefetch =
        pl::pallas_call(copy_kernel, pl::PrefetchScalarGridSpec{.num_scalar_prefetch = -1}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(negative_prefetch(x), Contains("num_scalar_prefetch is negative"), UserError);
  }

  TEST_CASE("errors: block specs") {
    pl::Array x = pl::Array::zeros({16, 4}, pl::f32);
    auto rank = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}, .in_specs = {row_spec()}}, pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(rank(x), Contains("the block shape of input 0 has another rank than the array"), UserError);
    auto out_rank = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}, .out_specs = {row_spec()}},
                                    pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(out_rank(x), Contains("the block shape of output 0 has another rank"), UserError);
    // A block dim of 0 is an error (a zero-size array or grid dim runs; a block must hold elements),
    // at the block spec's line; the next call works.
    const int zero_line = __LINE__ + 2;
    auto zero = pl::pallas_call(copy_kernel,
                                pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({0, 4}, [](pl::Value i) { return pl::idx(i, 0); })}},
                                pl::ShapeDtype({16, 4}, pl::f32));
    try {
      zero(x);
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      CHECK(e.problem().find("block dims of input 0 must be positive") != std::string::npos);
      CHECK(e.given() == "block dim 0 is 0 (array shape (16, 4))");
      CHECK(e.fix().find("use sizes >= 1, or pl::squeezed") != std::string::npos);
      CHECK(e.loc().line == static_cast<uint32_t>(zero_line));
      CHECK(std::string(e.what()).find(fmt::format("errors_test.cpp:{}", zero_line)) != std::string::npos);
    }
    auto rows = pl::pallas_call(copy_kernel,
                                pl::GridSpec{.grid = {16}, .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); })},
                                             .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); })}},
                                pl::ShapeDtype({16, 4}, pl::f32));
    const pl::Array copied = rows(pl::Array::arange(64, pl::f32).reshape({16, 4}));
    CHECK(copied.at<float>({15, 3}) == 63.0f);
    auto any_block = pl::pallas_call(
        copy_kernel,
        pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i, 0); }, pl::ANY)}},
        pl::ShapeDtype({16, 4}, pl::f32));
    // Pallas's Mosaic lowering takes ANY/HBM blocks only when the block is the whole array at block
    // index 0 (the kernel then gets the array itself, ANY/HBM specs test): a smaller block, a
    // computed index or a squeezed dim is rejected.
    CHECK_THROWS_WITH_AS(any_block(x),
                         Contains("input 0 is in memory space ANY, which the kernel gets whole: its block must be the "
                                  "whole array at block index 0"),
                         UserError);
    CHECK_THROWS_WITH_AS(any_block(x), Contains("block (8, 4) of an array of shape (16, 4), at block indices the index map computes"),
                         UserError);
    auto hbm_moving = pl::pallas_call(
        copy_kernel,
        pl::GridSpec{.grid = {2},
                     .out_specs = {pl::BlockSpec({16, 4}, [](pl::Value i) { return pl::idx(i, 0); }, pl::HBM)}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(hbm_moving(x), Contains("output 0 is in memory space HBM, which the kernel gets whole"), UserError);
    auto any_squeezed = pl::pallas_call(
        [](pl::Ref, pl::Ref) {},
        pl::GridSpec{.grid = {2},
                     .in_specs = {pl::BlockSpec({pl::squeezed, 4}, [](pl::Value) { return pl::idx(0, 0); }, pl::ANY)}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(any_squeezed(pl::Array::zeros({1, 4}, pl::f32)),
                         Contains("block (squeezed, 4) of an array of shape (1, 4)"), UserError);
    auto arity = pl::pallas_call(
        copy_kernel, pl::GridSpec{.grid = {2, 2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i, 0); })}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(arity(x), Contains("the index map of input 0 takes 1 parameter(s), but the call passes 2"), UserError);
    auto count = pl::pallas_call(copy_kernel,
                                 pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i); })}},
                                 pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(count(x), Contains("the index map of input 0 returns 1 index(es) for an array of rank 2"), UserError);
    auto floaty = pl::pallas_call(
        copy_kernel, pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i, 0.5); })}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(floaty(x), Contains("returns a float index"), UserError);
    auto block_valued = pl::pallas_call(
        copy_kernel,
        pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i, pl::zeros({2}, pl::i32)); })}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(block_valued(x), Contains("must return integer scalars"), UserError);
    auto wrong_kind = pl::pallas_call(
        [](pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); },
        pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {2},
                                   .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(wrong_kind(pl::Array::zeros({2}, pl::i32), x),
                         Contains("index map parameter 1 is declared pl::Value but receives a scalar-prefetch ref"), UserError);
    auto ref_for_index = pl::pallas_call(
        copy_kernel, pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Ref) { return pl::idx(0, 0); })}},
        pl::ShapeDtype({16, 4}, pl::f32));
    CHECK_THROWS_WITH_AS(ref_for_index(x), Contains("declared pl::Ref but receives a grid index"), UserError);
  }

  TEST_CASE("errors: scratch shapes and aliases") {
    pl::Array x = pl::Array::zeros({16}, pl::f32);
    auto scratch = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref) { o() = x(); },
                                   pl::GridSpec{.scratch_shapes = {pl::ANY({4}, pl::f32)}}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(scratch(x), Contains("scratch 0 is in ANY, which cannot be allocated in a kernel"), UserError);
    auto neg = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref) { o() = x(); },
                               pl::GridSpec{.scratch_shapes = {pl::VMEM({-4}, pl::f32)}}, pl::ShapeDtype({16}, pl::f32));
    CHECK_THROWS_WITH_AS(neg(x), Contains("scratch 0 has a negative dim"), UserError);
    auto alias = [&](std::map<int, int> a, pl::ShapeDtype out, int prefetch = 0) {
      pl::CallOptions o;
      o.input_output_aliases = std::move(a);
      if (prefetch)
        return pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); },
                               pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1}, out, o);
      return pl::pallas_call(copy_kernel, pl::PrefetchScalarGridSpec{}, out, o);
    };
    CHECK_THROWS_WITH_AS(alias({{1, 0}}, pl::ShapeDtype({16}, pl::f32))(x), Contains("names an input that does not exist"), UserError);
    CHECK_THROWS_WITH_AS(alias({{0, 1}}, pl::ShapeDtype({16}, pl::f32))(x), Contains("names an output that does not exist"),
                         UserError);
    CHECK_THROWS_WITH_AS(alias({{0, 0}}, pl::ShapeDtype({8}, pl::f32))(x),
                         Contains("an aliased input and output differ in shape or dtype"), UserError);
    CHECK_THROWS_WITH_AS(alias({{0, 0}}, pl::ShapeDtype({16}, pl::f32), 1)(pl::Array::zeros({1}, pl::i32), x),
                         Contains("a scalar-prefetch operand cannot be aliased"), UserError);
    auto dup = pl::pallas_call([](pl::Ref a, pl::Ref, pl::Ref o) { o() = a(); }, pl::GridSpec{}, pl::ShapeDtype({16}, pl::f32),
                               {.input_output_aliases = {{0, 0}, {1, 0}}});
    CHECK_THROWS_WITH_AS(dup(x, x), Contains("two inputs alias the same output"), UserError);
  }

  TEST_CASE("errors: copies and semaphores") {
    pl::Array x = pl::Array::zeros({8, 4}, pl::f32);
    // Runs `kernel` over x in ANY with an output in ANY; scratch: a (8, 4) VMEM buffer, a DMA
    // semaphore, a regular one and an array of two DMA semaphores.
    auto run = [&](std::function<void(pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref, pl::Ref)> kernel) {
      pl::pallas_call(kernel,
                      pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)},
                                   .out_specs = {pl::BlockSpec(pl::ANY)},
                                   .scratch_shapes = {pl::VMEM({8, 4}, pl::f32), pl::SemaphoreType::DMA,
                                                      pl::SemaphoreType::REGULAR, pl::SemaphoreType::DMA({2})}},
                      pl::ShapeDtype({8, 4}, pl::f32), testing::interpret())(x);
    };
    using R = pl::Ref;
    CHECK_THROWS_WITH_AS(run([](R x, R, R buf, R dma, R, R) { pl::make_async_copy(x.at(pl::ds(0, 4)), buf, dma); }),
                         Contains("pl::make_async_copy: the source and destination differ in shape"), UserError);
    auto dtypes = pl::pallas_call(
        [](R x, R o, R ints, R dma) {
          pl::async_copy(x.at(0), ints, dma);
          o() = pl::zeros_like(o);
        },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .scratch_shapes = {pl::VMEM({4}, pl::i32), pl::SemaphoreType::DMA}},
        pl::ShapeDtype({4}, pl::f32), testing::interpret());
    CHECK_THROWS_WITH_AS(dtypes(x), Contains("pl::make_async_copy: the source and destination differ in dtype"), UserError);
    CHECK_THROWS_WITH_AS(run([](R x, R o, R, R, R sem, R) { pl::async_copy(x, o, sem); }),
                         Contains("pl::make_async_copy needs a DMA semaphore, but got a regular semaphore"), UserError);
    CHECK_THROWS_WITH_AS(run([](R x, R o, R, R, R, R) { pl::async_copy(x, o, x); }),
                         Contains("pl::make_async_copy needs a semaphore"), UserError);
    CHECK_THROWS_WITH_AS(run([](R x, R o, R, R, R, R dmas) { pl::async_copy(x, o, dmas); }),
                         Contains("pl::make_async_copy needs one semaphore, not an array of them"), UserError);
    CHECK_THROWS_WITH_AS(run([](R x, R o, R, R dma, R, R) { pl::async_copy(o, x, dma); }),
                         Contains("pl::make_async_copy would write into `input 0`, an input of the call"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R dma, R sem, R) { pl::async_copy(sem, sem, dma); }),
                         Contains("pl::make_async_copy: semaphores cannot be copied"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R dma, R, R) { pl::semaphore_wait(dma); }),
                         Contains("pl::semaphore_wait needs a regular semaphore, but got a DMA semaphore"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R, R sem, R) { pl::semaphore_signal(sem, 1.5); }),
                         Contains("pl::semaphore_signal: the amount must be an integer"), UserError);
    // An amount of 2^32 + 1 as a u64 (or i64, u32) was cast to i32 and signalled 1, silently.
    for (pl::DType wide : {pl::i64, pl::u32, pl::u64}) {
      INFO(pl::dtype_name(wide));
      try {
        run([wide](R, R, R, R, R sem, R) { pl::semaphore_signal(sem, pl::full({}, 1, wide)); });
        FAIL("expected a UserError");
      } catch (const UserError& e) {
        CHECK(e.problem() == fmt::format("pl::semaphore_signal: the amount must be an i32 scalar, and a{} {} scalar may not fit one",
                                         wide == pl::i64 ? "n" : "", pl::dtype_name(wide)));
        CHECK(e.fix().find(".astype(pl::i32)") != std::string::npos);
        CHECK(std::string(e.what()).find("errors_test.cpp") != std::string::npos);
      }
    }
    // Narrower integers always fit, and are taken.
    run([](R, R, R, R, R sem, R) {
      pl::semaphore_signal(sem, pl::full({}, 2, pl::u16));
      pl::semaphore_wait(sem, 2);
    });
    CHECK_THROWS_WITH_AS(run([](R, R, R buf, R, R sem, R) { buf(0, 0) = sem().astype(pl::f32); }),
                         Contains("cannot load from a semaphore"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R, R, R, R sem, R) { sem() = 1; }), Contains("cannot store to a semaphore"), UserError);
  }

  TEST_CASE("errors: run_scoped and emit_pipeline") {
    pl::Array x = pl::Array::zeros({8, 8}, pl::f32);
    auto run = [&](std::function<void(pl::Ref, pl::Ref)> kernel) {
      pl::pallas_call(kernel, pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}},
                      pl::ShapeDtype({8, 8}, pl::f32), testing::interpret())(x);
    };
    using R = pl::Ref;
    CHECK_THROWS_WITH_AS(run([](R, R) { pl::run_scoped([](R) {}, pl::HBM({8}, pl::f32)); }),
                         Contains("pl::run_scoped allocates `run_scoped 0` in HBM, which only the interpreter can"), UserError);
    CHECK_THROWS_WITH_AS(run([](R, R) { pl::run_scoped([](R) {}, pl::SMEM({-1}, pl::i32)); }),
                         Contains("pl::run_scoped: run_scoped 0 has a negative dim"), UserError);
    auto rows = [] { return pl::BlockSpec({2, 8}, [](pl::Value i) { return pl::idx(i, 0); }); };
    CHECK_THROWS_WITH_AS(run([&](R x, R) { pl::emit_pipeline([](R, R) {}, {.grid = {4}, .in_specs = {rows()}, .out_specs = {rows()}})(x); }),
                         Contains("pl::emit_pipeline: the pipeline is called with another number of refs than it has specs"),
                         UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) { pl::emit_pipeline([](R) {}, {.grid = {4}, .in_specs = {rows()}, .out_specs = {rows()}})(x, o); }),
                         Contains("pl::emit_pipeline: the body takes another number of refs than the pipeline has specs"),
                         UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R, R) {}, {.grid = {4}, .in_specs = {rows()}, .out_specs = {rows()}})(o, x);
                         }),
                         Contains("pl::emit_pipeline would write into `input 0`, an input of the call"), UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R, R) {},
                                             {.grid = {4},
                                              .in_specs = {rows()},
                                              .out_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return pl::idx(i, 0); },
                                                                          pl::Buffered(3))}})(x, o);
                         }),
                         Contains("pl::emit_pipeline: emit_pipeline output 0 asks for 3 block buffers"), UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R, R) {},
                                             {.grid = {4},
                                              .in_specs = {pl::BlockSpec({2, 8}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })},
                                              .out_specs = {rows()}})(x, o);
                         }),
                         Contains("the index map of emit_pipeline input 0 takes 2 parameter(s), but the call passes 1"),
                         UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R a, R b) { b() = a(); pl::program_id(1); },
                                             {.grid = {4}, .in_specs = {rows()}, .out_specs = {rows()}})(x, o);
                         }),
                         Contains("pl::program_id: axis 1 is out of range for the grid"), UserError);
    // Pallas's emit_pipeline has no buffer memory space ANY: an ANY spec with a window is rejected
    // (pl::HBM gives a view of the block).
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R, R) {},
                                             {.grid = {4},
                                              .in_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return pl::idx(i, 0); }, pl::ANY)},
                                              .out_specs = {rows()}})(x, o);
                         }),
                         Contains("pl::emit_pipeline: emit_pipeline input 0 is in memory space ANY, which pl::emit_pipeline "
                                  "does not window"),
                         UserError);
    CHECK_THROWS_WITH_AS(run([&](R x, R o) {
                           pl::emit_pipeline([](R, R) {},
                                             {.grid = {4},
                                              .in_specs = {rows()},
                                              .out_specs = {pl::BlockSpec({pl::Element(2, {1, 0}), 8},
                                                                          [](pl::Value i) { return pl::idx(i * 2, 0); }, pl::HBM)}})(x, o);
                         }),
                         Contains("emit_pipeline output 0 is a view of an HBM array, which pl::Element padding cannot extend"),
                         UserError);
  }
}

// The corpus of mistakes, one test per kind: each checks the error's type, its key words, that it
// names the user's line, and that the next call in the process works.
namespace {

template <class E>
void expect_error(const std::function<void()>& f, std::initializer_list<const char*> words, const int& line) {
  try {
    f();
    FAIL("expected an error");
  } catch (const E& e) {
    const std::string what = e.what();
    for (const char* w : words) CHECK_MESSAGE(what.find(w) != std::string::npos, what);
    CHECK_MESSAGE(what.find(fmt::format("errors_test.cpp:{}", line)) != std::string::npos, what);
  }
}

void next_call_works(const pl::CallOptions& options = {}) {
  auto fine = pl::pallas_call(copy_kernel, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), options);
  CHECK(fine(pl::Array::arange(8, pl::f32)).at<float>({7}) == 7.0f);
}

}  // namespace

TEST_SUITE("errors") {
  TEST_CASE("corpus: shape") {
    int line = 0;
    expect_error<UserError>([&] {
      trace1([&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o(pl::ds(0, 4)) = x();
      });
    }, {"the stored value's shape differs from the ref window's", "(8, 8)"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: arity") {
    auto three = pl::pallas_call([](pl::Ref, pl::Ref, pl::Ref) {}, pl::GridSpec{}, pl::ShapeDtype({16}, pl::f32));
    const int line = __LINE__ + 1;
    expect_error<UserError>([&] { three(pl::Array::zeros({16}, pl::f32)); },
                            {"the kernel takes a different number of refs than the call provides", "3 pl::Ref parameter(s)"},
                            line);
    next_call_works();
  }

  TEST_CASE("corpus: dtype") {
    int line = 0;
    expect_error<UserError>([&] {
      trace1([&](pl::Ref x, pl::Ref o) {
        line = __LINE__ + 1;
        o() = x().astype(pl::bf16);
      });
    }, {"the stored value's dtype differs from the ref's", ".astype(pl::f32)"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: spec/array mismatch") {
    const int line = __LINE__ + 1;
    auto rank = pl::pallas_call(copy_kernel, pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })}},
                                pl::ShapeDtype({16, 4}, pl::f32));
    expect_error<UserError>([&] { rank(pl::Array::zeros({16, 4}, pl::f32)); },
                            {"the block shape of input 0 has another rank than the array", "block of 1 dims"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: index-map rank") {
    const int line = __LINE__ + 2;
    auto count = pl::pallas_call(copy_kernel,
                                 pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8, 4}, [](pl::Value i) { return pl::idx(i); })}},
                                 pl::ShapeDtype({16, 4}, pl::f32));
    expect_error<UserError>([&] { count(pl::Array::zeros({16, 4}, pl::f32)); },
                            {"the index map of input 0 returns 1 index(es) for an array of rank 2"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: out-of-bounds ds and prefetch-driven indices") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      // A dynamic slice past the end of its ref.
      int line = 0;
      auto slice = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o) {
            line = __LINE__ + 1;
            o() = x(pl::ds(pl::program_id(0) + 6, 4));
          },
          pl::GridSpec{.grid = {1}}, pl::ShapeDtype({4}, pl::f32), options);
      expect_error<RuntimeError>([&] { slice(pl::Array::zeros({8}, pl::f32)); },
                                 {"out-of-bounds slice of `input 0 block`: ds(6, 4)", "valid elements are [0, 8)"}, line);
      // A block index read from a scalar-prefetch operand, past the array.
      const int map_line = __LINE__ + 1;
      const pl::BlockSpec by_table({4}, [](pl::Value i, pl::Ref table) { return pl::idx(table(i)); });
      auto gather = pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o() = x(); },
                                    pl::PrefetchScalarGridSpec{.num_scalar_prefetch = 1, .grid = {2}, .in_specs = {by_table},
                                                               .out_specs = {pl::BlockSpec({4}, [](pl::Value i, pl::Ref) { return pl::idx(i); })}},
                                    pl::ShapeDtype({8}, pl::f32), options);
      expect_error<RuntimeError>([&] { gather(pl::Array::from_vector<int32_t>({1, 5}, {2}, pl::i32), pl::Array::zeros({8}, pl::f32)); },
                                 {"block of input 0 out of bounds", "starts at element (20)", "grid point (1)"}, map_line);
      next_call_works(options);
    });
  }

  TEST_CASE("corpus: semaphores left non-zero") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      int line = __LINE__ + 2;
      auto call = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref sem) { pl::semaphore_signal(sem, 2); o() = x(); },
                                  pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}}, pl::ShapeDtype({8}, pl::f32),
                                  options);
      expect_error<RuntimeError>([&] { call(pl::Array::zeros({8}, pl::f32)); },
                                 {"semaphore `scratch 0` is 2 when the kernel ends", "2 signalled that no semaphore_wait took"},
                                 line);
      next_call_works(options);
    });
  }

  TEST_CASE("corpus: a wait that never gets a signal") {
    testing::for_each_backend([](const pl::CallOptions& options) {
      int line = 0;
      auto call = pl::pallas_call(
          [&](pl::Ref x, pl::Ref o, pl::Ref sem) {
            line = __LINE__ + 1;
            pl::semaphore_wait(sem, 3);
            o() = x();
          },
          pl::GridSpec{.scratch_shapes = {pl::SemaphoreType::REGULAR}}, pl::ShapeDtype({8}, pl::f32), options);
      expect_error<RuntimeError>([&] { call(pl::Array::zeros({8}, pl::f32)); },
                                 {"deadlock: this semaphore_wait can never return", "holds 0 and the wait needs 3"}, line);
      next_call_works(options);
    });
  }

  TEST_CASE("corpus: a remote copy outside the mesh") {
    pl::Mesh mesh({2}, {"x"});
    testing::for_each_backend([&](const pl::CallOptions& options) {
      // The line the error names; each device traces the kernel on its own thread, so it is fixed here.
      const int line = __LINE__ + 3;
      auto send = testing::on_every_device(
          [&](pl::Ref in, pl::Ref out, pl::Ref s, pl::Ref r) {
            pl::make_async_remote_copy(in, out, s, r, pl::DeviceId({pl::axis_index("x") + 2})).start();
          },
          mesh, pl::P("x"), {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA}, options);
      expect_error<RuntimeError>([&] { send(pl::Array::zeros({4}, pl::f32)); },
                                 {"is outside Mesh('x': 2)", "its coordinate on axis `x` is "}, line);
      auto fine = testing::on_every_device([](pl::Ref in, pl::Ref out) { pl::sync_copy(in, out); }, mesh, pl::P("x"), {}, options);
      CHECK(fine(pl::Array::arange(4, pl::f32)).gather().at<float>({3}) == 3.0f);
      next_call_works(options);
    });
  }

  TEST_CASE("corpus: alias mistakes") {
    auto call = pl::pallas_call(copy_kernel, pl::GridSpec{}, pl::ShapeDtype({8}, pl::f32), {.input_output_aliases = {{0, 0}}});
    const int line = __LINE__ + 1;
    expect_error<UserError>([&] { call(pl::Array::zeros({16}, pl::f32)); },
                            {"an aliased input and output differ in shape or dtype"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: emit_pipeline misuse") {
    int line = 0;
    auto rows = [] { return pl::BlockSpec({2, 8}, [](pl::Value i) { return pl::idx(i, 0); }); };
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o) {
          line = __LINE__ + 1;
          pl::emit_pipeline([](pl::Ref) {}, {.grid = {4}, .in_specs = {rows()}, .out_specs = {rows()}})(x, o);
        },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}, .out_specs = {pl::BlockSpec(pl::ANY)}}, pl::ShapeDtype({8, 8}, pl::f32));
    expect_error<UserError>([&] { call(pl::Array::zeros({8, 8}, pl::f32)); },
                            {"pl::emit_pipeline: the body takes another number of refs than the pipeline has specs"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: a moving ANY block in a pallas_call") {
    const int line = __LINE__ + 3;
    auto call = pl::pallas_call(
        copy_kernel,
        pl::GridSpec{.grid = {2}, .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); }, pl::ANY)}},
        pl::ShapeDtype({16}, pl::f32));
    expect_error<UserError>([&] { call(pl::Array::zeros({16}, pl::f32)); },
                            {"input 0 is in memory space ANY, which the kernel gets whole", "block (8,) of an array of shape (16,)",
                             "pl::BlockSpec(pl::ANY)"},
                            line);
    next_call_works();
  }

  TEST_CASE("corpus: mpmd_map misuse") {
    auto k2 = [](pl::Ref, pl::Ref) {};
    const int line = __LINE__ + 1;
    expect_error<UserError>([&] { pl::mpmd_map({{pl::CoreMesh("core", 2), k2}, {pl::Mesh({4, 2}, {"core", "sub"}), k2}}, pl::ShapeDtype({8}, pl::f32)); },
                            {"mpmd_map `kernel`: conflicting size for axis `core`"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: a load from a ref reachable only by DMA") {
    // It used to say <unknown location>: o() = x() reported x's load without x()'s line.
    int line = 0;
    auto call = pl::pallas_call(
        [&](pl::Ref x, pl::Ref o) {
          line = __LINE__ + 1;
          o() = x();
        },
        pl::GridSpec{.in_specs = {pl::BlockSpec(pl::ANY)}}, pl::ShapeDtype({4}, pl::f32));
    expect_error<UserError>([&] { call(pl::Array::zeros({4}, pl::f32)); },
                            {"cannot load from a ref in memory space ANY", "reachable only by DMA"}, line);
    next_call_works();
  }

  TEST_CASE("corpus: uninitialised scratch") {
    // Reads its f32 scratch without writing it first (wrong), or after writing it (right).
    int line = 0;
    auto scratch_call = [&line](bool write_first, const pl::CallOptions& options) {
      return pl::pallas_call(
          [&line, write_first](pl::Ref x, pl::Ref o, pl::Ref scratch) {
            if (write_first) scratch() = pl::full({4}, 1.0f, pl::f32);
            line = __LINE__ + 1;
            o() = x() + scratch();
          },
          pl::GridSpec{.scratch_shapes = {pl::VMEM({4}, pl::f32)}}, pl::ShapeDtype({4}, pl::f32), options);
    };
    const pl::Array x = pl::Array::arange(4, pl::f32);
    // The interpreter reports the read (uninitialized_memory = nan, the default).
    expect_error<RuntimeError>([&] { scratch_call(false, testing::interpret())(x); },
                               {"read of never-written scratch: `scratch 0` (a (4,) f32 ref in vmem)", "at element (0)",
                                "initialise it under pl::when(pl::program_id(k) == 0)"},
                               line);
    next_call_works(testing::interpret());
    // uninitialized_memory = zero: scratch starts at zero, as in Pallas's interpreter, and reads as such.
    pl::InterpretParams zero;
    zero.uninitialized_memory = pl::UninitializedMemory::zero;
    CHECK(scratch_call(false, testing::interpret(zero))(x).to_vector<float>() == x.to_vector<float>());
    // Compiled code reads whatever the memory held (unspecified, docs/design.md §4.6): nothing to check.
    testing::for_each_backend([&](const pl::CallOptions& options) {
      CHECK(scratch_call(true, options)(x).to_vector<float>() == std::vector<float>{1, 2, 3, 4});
      next_call_works(options);
    });
  }

  TEST_CASE("corpus: an integer literal out of its dtype's range") {
    // x + 300 on an i8: the literal takes i8 (weak typing), where 300 used to wrap to 44.
    const pl::Array x = pl::Array::from_vector<int8_t>({1, 2, 3, 4}, {4});
    int line = 0;
    auto plus = [&](int64_t literal) {
      return pl::pallas_call(
          [&line, literal](pl::Ref in, pl::Ref o) {
            line = __LINE__ + 1;
            o() = in() + literal;
          },
          pl::GridSpec{}, pl::ShapeDtype({4}, pl::i8), testing::interpret());
    };
    expect_error<UserError>([&] { plus(300)(x); },
                            {"the integer literal 300 is out of range of i8", "300 as i8, whose values are [-128, 127]",
                             "use a value in [-128, 127]"},
                            line);
    expect_error<UserError>([&] { plus(-129)(x); }, {"the integer literal -129 is out of range of i8"}, line);
    // A negative literal next to an unsigned value is out of range too (as JAX's OverflowError).
    const int u_line = __LINE__ + 1;
    auto negate = pl::pallas_call([](pl::Ref in, pl::Ref o) { o() = in() * -1; }, pl::GridSpec{},
                                  pl::ShapeDtype({4}, pl::u8), testing::interpret());
    expect_error<UserError>([&] { negate(pl::Array::from_vector<uint8_t>({1, 2, 3, 4}, {4})); },
                            {"the integer literal -1 is out of range of u8", "[0, 255]"}, u_line);
    // A fill: pl::full and pl::full_like with an integer follow the same rule.
    auto fill = [&](int64_t value) {
      return pl::pallas_call(
          [&line, value](pl::Ref o) {
            line = __LINE__ + 1;
            o() = pl::full({4}, value, pl::i16);
          },
          pl::GridSpec{}, pl::ShapeDtype({4}, pl::i16), testing::interpret());
    };
    expect_error<UserError>([&] { fill(70000)(); },
                            {"the integer literal 70000 is out of range of i16", "whose values are [-32768, 32767]"}, line);
    auto like = pl::pallas_call(
        [&](pl::Ref in, pl::Ref o) {
          line = __LINE__ + 1;
          o() = pl::full_like(in(), -40000);
        },
        pl::GridSpec{}, pl::ShapeDtype({4}, pl::i16), testing::interpret());
    expect_error<UserError>([&] { like(pl::Array::from_vector<int16_t>({1, 2, 3, 4}, {4})); },
                            {"the integer literal -40000 is out of range of i16"}, line);
    testing::for_each_backend([&](const pl::CallOptions& options) {
      // The edges of the range are themselves; a double fill still converts as the host's does
      // (truncated and saturated).
      auto edges = pl::pallas_call([](pl::Ref in, pl::Ref o) { o() = in() + 127 - 127 + (-128) - (-128); }, pl::GridSpec{},
                                   pl::ShapeDtype({4}, pl::i8), options);
      CHECK(edges(x).to_vector<int8_t>() == x.to_vector<int8_t>());
      auto lowest = pl::pallas_call([](pl::Ref o) { o() = pl::full({4}, -32768, pl::i16); }, pl::GridSpec{},
                                    pl::ShapeDtype({4}, pl::i16), options);
      CHECK(lowest().to_vector<int16_t>() == std::vector<int16_t>(4, -32768));
      auto saturated = pl::pallas_call([](pl::Ref o) { o() = pl::full({4}, 70000.0, pl::i16); }, pl::GridSpec{},
                                       pl::ShapeDtype({4}, pl::i16), options);
      CHECK(saturated().to_vector<int16_t>() == pl::Array::full({4}, 70000.0, pl::i16).to_vector<int16_t>());
      next_call_works(options);
    });
  }
}
