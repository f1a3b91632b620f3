#include "ops/megablox/group_metadata.h"

#include <algorithm>

namespace tessera::megablox {

namespace {

// jnp.repeat(values, counts, total_repeat_length=total): each value counts[i] times, cut or padded
// (with the last value) to `total` entries.
std::vector<int32_t> repeat(const std::vector<int64_t>& counts, int64_t total) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(total));
  for (size_t v = 0; v < counts.size(); ++v)
    for (int64_t c = 0; c < counts[v] && static_cast<int64_t>(out.size()) < total; ++c) out.push_back(static_cast<int32_t>(v));
  const int32_t last = counts.empty() ? 0 : static_cast<int32_t>(counts.size() - 1);
  while (static_cast<int64_t>(out.size()) < total) out.push_back(last);
  return out;
}

}  // namespace

GroupMetadata make_group_metadata(const std::vector<int32_t>& group_sizes, int64_t m, int64_t tm, int64_t start_group,
                                  int64_t num_nonzero_groups, bool visit_empty_groups) {
  const int64_t num_groups = static_cast<int64_t>(group_sizes.size());
  const int64_t end_group = start_group + num_nonzero_groups - 1;
  const int64_t tiles_m = m / tm;
  const int64_t table_size = tiles_m + num_groups - 1;

  GroupMetadata md;
  md.group_offsets.assign(static_cast<size_t>(num_groups + 1), 0);
  for (int64_t g = 0; g < num_groups; ++g) md.group_offsets[g + 1] = md.group_offsets[g] + group_sizes[g];

  // Tiles per group: its rows rounded out to whole tiles (a group starting inside a tile also owns
  // that partial tile), one tile for an empty group when asked, none otherwise.
  std::vector<int64_t> group_tiles(static_cast<size_t>(num_groups));
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t start = md.group_offsets[g], end = md.group_offsets[g + 1];
    const int64_t rounded = group_sizes[g] == 0 ? 0 : (end + tm - 1) / tm * tm - start / tm * tm;
    group_tiles[g] = group_sizes[g] == 0 && visit_empty_groups ? 1 : rounded / tm;
  }
  md.group_ids = repeat(group_tiles, table_size);

  // Visits per m-tile: once by the group owning its first row, plus once by every other group that
  // starts inside it (and, when empty groups are visited, by every empty group starting in it).
  std::vector<int64_t> tile_visits(static_cast<size_t>(tiles_m), 1);
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t start = md.group_offsets[g];
    const bool extra_visit = group_sizes[g] == 0 ? visit_empty_groups : start % tm != 0;
    if (extra_visit && start / tm < tiles_m) ++tile_visits[start / tm];
  }
  md.m_tile_ids = repeat(tile_visits, table_size);

  // The shard's steps first: rotate left past the steps of the groups before start_group.
  const int64_t first = std::count_if(md.group_ids.begin(), md.group_ids.end(),
                                      [&](int32_t g) { return g < start_group; });
  std::rotate(md.group_ids.begin(), md.group_ids.begin() + first, md.group_ids.end());
  std::rotate(md.m_tile_ids.begin(), md.m_tile_ids.begin() + first, md.m_tile_ids.end());

  for (int64_t g = std::max<int64_t>(start_group, 0); g <= end_group && g < num_groups; ++g) md.num_tiles += group_tiles[g];
  return md;
}

}  // namespace tessera::megablox
