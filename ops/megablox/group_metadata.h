// The host-side schedule of a grouped matmul: which group and which m-tile every grid step works on.
//
// The rows of lhs are split into consecutive groups (group_sizes). The grid walks m-tiles of tm rows;
// a tile that holds rows of several groups is visited once per group, consecutively, so its output
// block stays resident while each group merges its rows in (the kernels mask the others). Pallas's
// megablox builds this with jnp on the device; tessera's group sizes are host data, so it is plain
// C++ here, and the tables reach the kernel by scalar prefetch.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::megablox {

struct GroupMetadata {
  // The row at which group g starts, for g in [0, num_groups]; group_offsets[num_groups] is the sum
  // of the sizes.
  std::vector<int32_t> group_offsets;
  // For grid step i (the first num_tiles entries are used; the tables have m / tm + num_groups - 1
  // entries): the group it works on and the m-tile it works on. Steps of the groups before
  // start_group are rotated to the end, so the shard's own steps come first.
  std::vector<int32_t> group_ids;
  std::vector<int32_t> m_tile_ids;
  // The grid steps the groups [start_group, start_group + num_nonzero_groups) need.
  int64_t num_tiles = 0;
};

// group_sizes: rows per group (non-negative, summing to at most m); m divisible by tm (checked by
// the callers, which report misuse). visit_empty_groups gives every empty group one step (tgmm
// must still zero its output); otherwise empty groups get none.
GroupMetadata make_group_metadata(const std::vector<int32_t>& group_sizes, int64_t m, int64_t tm, int64_t start_group,
                                  int64_t num_nonzero_groups, bool visit_empty_groups);

}  // namespace tessera::megablox
