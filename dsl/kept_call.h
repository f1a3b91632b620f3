// Call objects kept for the life of the process, one per key. A pallas_call keeps the programs it
// traced (per shape and mesh) with their compiled kernels, so code that makes the same call again and
// again (tessera's host collectives, the ops libraries in a training loop) neither traces nor loads
// its kernel again when it keeps the call object. The key names everything the call depends on;
// TESSERA_INTERPRET as it is when the call is made is added to it, since a call follows the setting
// it was made under; it is read at `loc`, the line of the user's call (a collective, a library op)
// that an invalid value reports.
//
// Front-end layer (dsl/), for tessera's own kernels and the libraries over it.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "runtime/config.h"

namespace tessera::detail {

template <class Call>
Call kept_call(const std::string& key, SourceLoc loc, const std::function<Call()>& make) {
  static auto* calls = new std::map<std::string, Call>();  // never destroyed: lives as long as the kernels
  static std::mutex mutex;
  const bool interpret = [&] {
    config::CallSite site(loc);
    return config::interpret();
  }();
  const std::string full_key = key + (interpret ? " interpret" : "");
  std::lock_guard lock(mutex);
  auto it = calls->find(full_key);
  if (it == calls->end()) it = calls->emplace(full_key, make()).first;
  return it->second;
}

}  // namespace tessera::detail
