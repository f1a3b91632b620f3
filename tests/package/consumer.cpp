// Built against an installed tessera: proves the package's headers, targets and dependencies.
#include <tessera/tessera.hpp>

#include <cstdio>

namespace pl = tessera;

int main() {
  auto add = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o() = x() + y(); }, pl::GridSpec{},
                             pl::ShapeDtype({4}, pl::f32));
  pl::Array out = add(pl::Array::arange(4, pl::f32), pl::Array::full({4}, 1, pl::f32));
  std::printf("%s\n", out.to_string().c_str());
  return out.to_vector<float>() == std::vector<float>{1, 2, 3, 4} ? 0 : 1;
}
