// Race detection's results (InterpretParams::detect_races, docs/design.md §4.17):
//
//   auto call = pl::pallas_call(kernel, spec, out, {.interpret = pl::InterpretParams{.detect_races = true}});
//   pl::Array o = call(x);
//   if (pl::races_found())
//     for (const pl::RaceReport& r : pl::race_reports()) std::cerr << r.message << "\n";
//
// Front-end layer (dsl/), public.
#pragma once

#include <vector>

#include "runtime/race_detector.h"

namespace tessera {

// One race: the buffer, both accesses (kind, device, core, grid point, region, the user's line) and
// the message that names them.
using RaceReport = rt::RaceReport;
using AccessSite = rt::AccessSite;
using AccessKind = rt::AccessKind;

// Whether the last call on this thread (a pallas_call, an mpmd_map, or a shard_map with the calls in
// it) found a race; false when it did not detect races.
bool races_found();
// Its races, one per pair of access sites (source lines and kinds) and buffer.
std::vector<RaceReport> race_reports();

}  // namespace tessera
