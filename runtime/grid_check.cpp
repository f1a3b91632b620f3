#include "runtime/grid_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessera::rt {

std::optional<size_t> bad_grid_dim(std::span<const int64_t> sizes) {
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] < 0 || sizes[d] > INT32_MAX) return d;
  return std::nullopt;
}

std::optional<std::string> grid_sizes_error(std::span<const int64_t> sizes, std::string_view what) {
  const std::string grid = fmt::format("({})", fmt::join(sizes, ", "));
  if (const std::optional<size_t> bad = bad_grid_dim(sizes)) {
    const size_t d = *bad;
    if (sizes[d] < 0)
      return fmt::format("{}: grid dim {} is {} (grid {}), but grid dims must be >= 0; compute a non-negative "
                         "number of steps (0 runs none), e.g. with jnp.maximum(n, 0)",
                         what, d, sizes[d], grid);
    if (sizes[d] > INT32_MAX)
      return fmt::format("{}: grid dim {} is {} (grid {}), which does not fit pl::program_id, a 32-bit integer (the "
                         "largest is {}); use larger blocks",
                         what, d, sizes[d], grid, INT32_MAX);
  }
  int64_t steps = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(steps, s, &steps))
      return fmt::format("{}: the grid {} has more steps than a 64-bit count holds; use fewer, larger blocks", what, grid);
  return std::nullopt;
}

}  // namespace tessera::rt
