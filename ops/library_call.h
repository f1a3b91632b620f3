// What the kernel libraries of ops/ share about making their pallas_calls: the options of a
// library kernel and the memo of compiled calls (dsl/kept_call.h), so a training loop traces each shape once.
//
// Library layer (ops/), over the front end.
#pragma once

#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "dsl/kept_call.h"
#include "dsl/pallas_call.h"

namespace tessera::ops {

// pallas_call options of a library kernel: its dimension semantics, the backend (`interpret`),
// differential mode, the name and cost a profile shows.
CallOptions library_call_options(std::vector<DimensionSemantics> dims, const std::optional<InterpretParams>& interpret,
                                 bool check_against_interpreter, const std::string& name, const CostEstimate& cost);

// The memoised call of a specialisation named by `key`. Compiled calls only: interpreted calls
// carry their own parameters and are made afresh. A call follows TESSERA_INTERPRET as it was when
// it was made (an invalid value reports `loc`, the user's call of the op), and differential mode is
// part of the key. `Call` is the PallasCall type of the op's kernel.
template <class Call = PallasCall<std::vector<Array>>>
Call memoised_call(const std::string& key, const std::optional<InterpretParams>& interpret,
                   bool check_against_interpreter, std::source_location loc,
                   const std::type_identity_t<std::function<Call()>>& make) {
  if (interpret) return make();
  return detail::kept_call<Call>(key + (check_against_interpreter ? " checked" : ""), loc, make);
}

}  // namespace tessera::ops
