// Host pl::Array misuse: every function that checks what it is given (the constructor and factories
// with a shape, from_vector with a wrong element count, reshape, at, item, element_string, shape2, an
// allocation the machine refuses) and the arithmetic operators (a + b, a - b, a * b, a += b) throw a
// UserError naming what is wrong and what was given, at the caller's line (runtime/array.h,
// dsl/host_ops.h).
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using A = pl::Array;

namespace {

constexpr int64_t kTwo32 = int64_t{1} << 32;

// Runs `f`, which must throw a UserError whose message holds every one of `words` and which points
// at `line` of this file.
template <class F>
void expect_error(int line, F f, std::initializer_list<std::string_view> words) {
  try {
    f();
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    const std::string what = e.what();
    for (std::string_view w : words) CHECK_MESSAGE(what.find(w) != std::string::npos, "missing `" << w << "` in:\n" << what);
    CHECK_MESSAGE(e.loc().line == static_cast<uint32_t>(line), what);
    CHECK_MESSAGE(e.loc().str().find("host_array_errors_test.cpp") != std::string::npos, what);
  }
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("host arrays: a shape no array can have is an error at the line that asked for it") {
    expect_error(__LINE__, [] { (void)A(pl::f32, {-3}); }, {"pl::Array: no array can have shape (-3,)", "dim 0 is -3"});
    expect_error(__LINE__, [] { A::zeros({2, -1}, pl::f32); }, {"no array can have shape (2, -1)", "dim 1 is -1"});
    expect_error(__LINE__, [] { A::empty({-2}, pl::i32); }, {"no array can have shape (-2,)", "a (-2,) i32 array"});
    expect_error(__LINE__, [] { A::full({4, -4}, 1.0, pl::bf16); }, {"no array can have shape (4, -4)", "bf16"});
    expect_error(__LINE__, [] { A::random_normal({-1, 8}, pl::f32, 7); }, {"no array can have shape (-1, 8)"});
    expect_error(__LINE__, [] { A::random_uniform({8, -8}, pl::f32, 7); }, {"no array can have shape (8, -8)"});
    expect_error(__LINE__, [] { A::zeros({kTwo32, kTwo32}, pl::f32); }, {"element count", "exceeds"});
    expect_error(__LINE__, [] { A::empty({int64_t{1} << 62}, pl::f32); }, {"4611686018427387904 elements of 4 bytes"});
    // A negative count for arange says so in its own words.
    expect_error(__LINE__, [] { A::arange(-5); }, {"Array::arange: the count is negative", "n = -5", "pass n >= 0"});
    // Zero-size arrays exist, however large their other dims.
    CHECK(A::zeros({0, kTwo32}, pl::f32).size() == 0);
    CHECK(A::arange(0).size() == 0);
  }

  TEST_CASE("host arrays: from_vector with a wrong element count or an impossible shape") {
    const std::vector<float> three{1, 2, 3};
    expect_error(__LINE__, [&] { A::from_vector(three, {2, 2}); },
                 {"Array::from_vector: the number of elements does not match the shape", "3 elements for shape (2, 2) (4 elements)"});
    expect_error(__LINE__, [&] { A::from_vector(three, {4}, pl::bf16); }, {"3 elements for shape (4,)"});
    // A negative dim is blamed as such, whatever the count says ((-1, -3) has 3 "elements").
    expect_error(__LINE__, [&] { A::from_vector(three, {-1, -3}); }, {"no array can have shape (-1, -3)", "dim 0 is -1"});
    expect_error(__LINE__, [&] { A::from_vector(three, {-3}); }, {"no array can have shape (-3,)"});
    CHECK(A::from_vector(three, {3, 1}).at<float>({2, 0}) == 3.0f);
  }

  TEST_CASE("host arrays: reshape, at, item, element_string and shape2 check what they are given") {
    const A x = A::arange(6, pl::f32);
    expect_error(__LINE__, [&] { x.reshape({4, 2}); },
                 {"Array::reshape: the new shape has a different number of elements", "(6,) (6 elements) to (4, 2) (8 elements)"});
    expect_error(__LINE__, [&] { x.reshape({-2, -3}); }, {"Array::reshape: no array can have shape (-2, -3)"});
    expect_error(__LINE__, [&] { x.at<float>({6}); }, {"Array::at: index out of range", "index 6 in dimension 0 of shape (6,)"});
    expect_error(__LINE__, [&] { x.at<float>({0, 0}); }, {"Array::at: the index needs one entry per dimension"});
    // item is for one element only: it used to return the first of many, and read past an empty array.
    expect_error(__LINE__, [&] { x.item(); },
                 {"Array::item: the array does not hold exactly one element", "a (6,) f32 array of 6 elements"});
    expect_error(__LINE__, [] { A::zeros({0}, pl::i32).item_int(); }, {"Array::item_int", "a (0,) i32 array of 0 elements"});
    expect_error(__LINE__, [&] { x.element_string(6); }, {"Array::element_string: index out of range", "flat index 6"});
    expect_error(__LINE__, [&] { x.element_string(-1); }, {"flat index -1", "use an index in [0, 6)"});
    expect_error(__LINE__, [&] { x.shape2(); }, {"Array::shape2: the array is not 2-D", "shape (6,)"});
    // The same functions given what they accept.
    CHECK(x.reshape({2, 3}).at<float>({1, 2}) == 5.0f);
    CHECK(A::scalar(2.5, pl::f32).item() == 2.5);
    CHECK(A::full({1, 1}, 7, pl::i32).item_int() == 7);
    CHECK(x.element_string(5) == "5");
    CHECK(x.astype(pl::i32).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  }

  TEST_CASE("host arrays: arithmetic operators on arrays of two shapes or of semaphores fail at the expression's line") {
    const A a = A::arange(6, pl::f32).reshape({2, 3}), b = A::arange(6, pl::f32), c = A::full({2, 3}, 1, pl::f32);
    expect_error(__LINE__, [&] { (void)(a + b); }, {"array +: the shapes differ", "(2, 3) and (6,)", "combine arrays of one shape"});
    expect_error(__LINE__, [&] { (void)(a - b); }, {"array -: the shapes differ", "(2, 3) and (6,)"});
    expect_error(__LINE__, [&] { (void)(b * a); }, {"array *: the shapes differ", "(6,) and (2, 3)"});
    expect_error(__LINE__, [&] { A acc = a; acc += b; }, {"array +=: the shapes differ", "(2, 3) and (6,)"});
    // In a chain, on temporaries: the line of the expression all the same.
    expect_error(__LINE__, [&] { (void)(a + c + b); }, {"array +: the shapes differ"});
    expect_error(__LINE__, [&] { (void)(b * (a - c)); }, {"array *: the shapes differ", "(6,) and (2, 3)"});
    expect_error(
        __LINE__, [&] { (void)(a * A::from_vector(std::vector<int64_t>{3}, {}, pl::DType::sem)); },
        {"array *: an array of semaphores holds counts, not numbers to compute with", "a () sem array", ".astype(pl::i64)"});
    // A right operand that converts to an array (a shard_map's result, gathered): the same.
    const pl::Mesh mesh({2}, {"i"});
    auto identity = pl::shard_map([](const A& x) { return x; }, mesh, {pl::P("i")}, {pl::P("i")});
    expect_error(__LINE__, [&] { (void)(a + identity(b)); }, {"array +: the shapes differ", "(2, 3) and (6,)"});
    CHECK((b * identity(b)).at<float>({5}) == 25.0f);
    // The same operators given arrays of one shape (and temporaries, and chains).
    CHECK((a + c + c).at<float>({1, 2}) == 7.0f);
    CHECK((a * (a - c)).at<float>({1, 0}) == 6.0f);
    A acc = a;
    acc += c;
    acc += acc * c;
    CHECK(acc.at<float>({0, 1}) == 4.0f);
  }

  TEST_CASE("host arrays: an allocation the machine refuses is an error at the line that asked for it") {
    if (!testing::kRefusedAllocationsThrow) return;
    // 128 TiB: refused at once.
    expect_error(__LINE__, [] { A::zeros({int64_t{1} << 45}, pl::f32); },
                 {"out of memory: cannot allocate a (35184372088832,) f32 array", "140737488355328 bytes"});
    expect_error(__LINE__, [] { A::empty({int64_t{1} << 44}, pl::f64); }, {"out of memory", "f64"});
    // The next array is made as usual.
    CHECK(A::zeros({4}, pl::f32).size() == 4);
  }
}
