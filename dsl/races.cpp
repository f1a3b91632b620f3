#include "dsl/races.h"

namespace tessera {

bool races_found() { return !rt::last_race_reports().empty(); }
std::vector<RaceReport> race_reports() { return rt::last_race_reports(); }

}  // namespace tessera
