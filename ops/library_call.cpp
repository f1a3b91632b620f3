#include "ops/library_call.h"

#include "dsl/kept_call.h"

namespace tessera::ops {

CallOptions library_call_options(std::vector<DimensionSemantics> dims, const std::optional<InterpretParams>& interpret,
                                 bool check_against_interpreter, const std::string& name, const CostEstimate& cost) {
  CallOptions opts;
  opts.compiler_params.dimension_semantics = std::move(dims);
  opts.interpret = interpret;
  opts.check_against_interpreter = check_against_interpreter;
  opts.cost_estimate = cost;
  opts.name = name;
  return opts;
}

PallasCall<std::vector<Array>> memoised_call(const std::string& key, const std::optional<InterpretParams>& interpret,
                                             bool check_against_interpreter, std::source_location loc,
                                             const std::function<PallasCall<std::vector<Array>>()>& make) {
  if (interpret) return make();
  return detail::kept_call<PallasCall<std::vector<Array>>>(key + (check_against_interpreter ? " checked" : ""), loc,
                                                           make);
}

}  // namespace tessera::ops
