// Example 1: add two vectors.
//
// The smallest pallas_call: a grid of 8 programs, each adding one 128-element block of x and y
// into the same block of the output. BlockSpecs say which block each program sees: program i gets
// elements [128 i, 128 i + 128).
#include <tessera/tessera.hpp>

#include <cstdio>

#include "examples/example_util.h"

namespace pl = tessera;

// A kernel is a C++ function over refs: inputs first, then outputs.
void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }

int main() {
  const int64_t n = 1024, block = 128;
  pl::Array x = pl::Array::arange(n, pl::f32);
  pl::Array y = pl::Array::random_normal({n}, pl::f32, /*seed=*/1);

  auto block_spec = pl::BlockSpec({block}, [](pl::Value i) { return pl::idx(i); });
  pl::Array reference = examples::host_map2(x, y, [](double a, double b) { return a + b; });

  return examples::run_in_every_backend("add_vectors", [&](const pl::CallOptions& options) {
    auto add = pl::pallas_call(add_kernel,
                               pl::GridSpec{.grid = {n / block}, .in_specs = {block_spec, block_spec}, .out_specs = {block_spec}},
                               pl::ShapeDtype({n}, pl::f32), options);
    pl::Array out = add(x, y);
    std::printf("  out = %s\n", out.to_string().c_str());
    return examples::Outcome{examples::check("out == x + y", out, reference, 0.0, 0.0), out};
  });
}
