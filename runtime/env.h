// The TESSERA_* environment variables, read in one place: TESSERA_INTERPRET, TESSERA_DUMP_IR,
// TESSERA_TIME_PASSES, TESSERA_NUM_THREADS, ... Each read happens when the setting is needed, so a
// process can change them between calls.
//
// Runtime layer.
#pragma once

#include <optional>
#include <string>

namespace tessera::env {

// The variable's value, or nullopt when unset.
std::optional<std::string> get(const char* name);
// Unset, "", "0", "false", "off", "no" mean false; anything else true.
bool flag(const char* name);

}  // namespace tessera::env
