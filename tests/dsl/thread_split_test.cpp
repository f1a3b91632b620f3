// Compiled grids on several threads (docs/design.md §4.11, runtime/thread_pool.h SharedRanges): the
// parallel points of each core's range may be run by any thread, as that core, but every result is
// the one thread's, bit for bit, whatever the thread count and whether the grid has fewer parallel
// points than threads or many more; the arbitrary (accumulating) dim is never split.
#include <doctest/doctest.h>
#include <cstring>

#include "examples/seed_matmul.h"

namespace pl = tessera;

namespace {

struct Case {
  const char* name;
  int64_t m, k, n;
  seed::Blocks blocks;
};

// The inputs of a dtype's matmul: f32, bf16 (f32 accumulation) or i8 (i32 accumulation).
std::pair<pl::Array, pl::Array> operands(pl::DType dtype, const Case& c) {
  if (dtype == pl::i8)
    return {pl::Array::random_uniform({c.m, c.k}, pl::i8, 2, -100, 100),
            pl::Array::random_uniform({c.k, c.n}, pl::i8, 3, -100, 100)};
  pl::Array x = pl::Array::random_normal({c.m, c.k}, pl::f32, 0), y = pl::Array::random_normal({c.k, c.n}, pl::f32, 1);
  if (dtype == pl::bf16) return {x.astype(pl::bf16), y.astype(pl::bf16)};
  return {x, y};
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("thread split: a compiled matmul gives the one-thread result bit for bit on 2, 3 and 4 threads") {
    const Case cases[] = {
        // One parallel point (grid 1 x 1 x 4): fewer than the threads, all on core 0.
        {"grid 1x1x4", 32, 128, 32, {32, 32, 32, pl::f32}},
        // Three parallel points (grid 3 x 1 x 2): some threads get none, one gets two.
        {"grid 3x1x2", 48, 64, 16, {16, 32, 16, pl::f32}},
        // 16 parallel points of 4 arbitrary steps each: many more than the threads.
        {"grid 4x4x4", 128, 128, 128, {32, 32, 32, pl::f32}},
    };
    for (pl::DType dtype : {pl::f32, pl::bf16, pl::i8}) {
      for (const Case& c : cases) {
        INFO(c.name, " ", tessera::dtype_name(dtype));
        seed::Blocks b = c.blocks;
        const pl::DType out = dtype == pl::i8 ? pl::i32 : pl::f32;
        b.acc = out;
        auto call = seed::make_matmul(c.m, c.k, c.n, out, {}, b);
        const auto [x, y] = operands(dtype, c);
        pl::set_num_threads(1);
        const pl::Array want = call(x, y);
        for (int threads : {2, 3, 4}) {
          pl::set_num_threads(threads);
          // Several launches: which thread runs which piece depends on timing.
          for (int run = 0; run < 5; ++run) {
            INFO(threads, " threads, run ", run);
            const pl::Array got = call(x, y);
            REQUIRE(got.nbytes() == want.nbytes());
            CHECK(std::memcmp(got.data(), want.data(), static_cast<size_t>(want.nbytes())) == 0);
          }
        }
        pl::set_num_threads(0);
      }
    }
  }
}
