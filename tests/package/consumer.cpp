// Built against an installed tessera: proves the package's headers, targets and dependencies.
#include <tessera/megablox.hpp>

#include <cstdio>

namespace pl = tessera;

int main() {
  auto add = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }, pl::GridSpec{},
                             pl::ShapeDtype({4}, pl::f32));
  pl::Array out = add(pl::Array::arange(4, pl::f32), pl::Array::full({4}, 1, pl::f32));
  std::printf("%s\n", out.to_string().c_str());
  // The kernel library: two groups of 8 rows, each times its own 4 x 4 matrix of ones.
  pl::Array grouped = tessera::megablox::gmm(pl::Array::full({16, 4}, 1, pl::f32), pl::Array::full({2, 4, 4}, 1, pl::f32),
                                             pl::Array::from_vector(std::vector<int32_t>{8, 8}, {2}),
                                             {.tiling = tessera::megablox::Tiling{8, 4, 4}});
  const bool ok = out.to_vector<float>() == std::vector<float>{1, 2, 3, 4} && grouped.at<float>({15, 3}) == 4.0f;
  return ok ? 0 : 1;
}
