// Host collectives for pl::shard_map functions (jax.lax's), among the devices along one mesh axis.
// Each is a tessera kernel whose remote copies move the data, launched as a collective on every
// device:
//
//   pl::all_gather(x, "x", /*axis=*/0, /*tiled=*/true)   the blocks of all devices along x, joined
//   pl::psum(x, "y")                                     the sum over the devices along y (index order)
//   pl::psum_scatter(x, "y", /*dim=*/1, /*tiled=*/true)  that sum, with device i keeping part i of dim
//   pl::ppermute(x, "x", {{0, 1}, {1, 0}})               x sent from device a to b for each (a, b);
//                                                        a device nothing is sent to gets zeros
//   pl::all_to_all(x, "x", /*split_axis=*/0, /*concat_axis=*/1, /*tiled=*/true)
//                                                        chunk j of split_axis to device j, which
//                                                        joins the chunks along concat_axis (untiled:
//                                                        split_axis has the axis' size and goes, and
//                                                        a new axis of that size comes at concat_axis)
//
// Every device of the mesh must call them in the same order (as every collective).
//
// Front-end layer (dsl/).
#pragma once

#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "runtime/array.h"

namespace tessera {

Array all_gather(const Array& x, const std::string& axis_name, int64_t axis = 0, bool tiled = false,
                 std::source_location loc = std::source_location::current());
Array psum(const Array& x, const std::string& axis_name, std::source_location loc = std::source_location::current());
Array psum_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension = 0, bool tiled = false,
                   std::source_location loc = std::source_location::current());
Array all_to_all(const Array& x, const std::string& axis_name, int64_t split_axis, int64_t concat_axis, bool tiled = false,
                 std::source_location loc = std::source_location::current());
Array ppermute(const Array& x, const std::string& axis_name, const std::vector<std::pair<int64_t, int64_t>>& perm,
               std::source_location loc = std::source_location::current());

}  // namespace tessera
