// The rule of the check_grid op (jit/ir/ops.def): which grid sizes, known only when a kernel runs, a
// pipeline may run with. The interpreter and compiled code (through the kernel ABI) both call it, so
// both fail with the same message; so does a launch whose pallas_call grid is sized by its arguments
// (Executable::grid_of), before any core runs.
//
// Runtime layer.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tessera::rt {

// Why the pipeline `what` cannot run a grid of `sizes` (one per grid dim), or nothing when it can:
// every size is >= 0 (0 runs no step) and fits program_id (an i32), and the step count fits an i64.
std::optional<std::string> grid_sizes_error(std::span<const int64_t> sizes, std::string_view what);

// The first dim whose size no grid may have (negative, or past program_id), if any: the dim
// grid_sizes_error names. (A grid whose dims are each fine may still have too many steps.)
std::optional<size_t> bad_grid_dim(std::span<const int64_t> sizes);

}  // namespace tessera::rt
