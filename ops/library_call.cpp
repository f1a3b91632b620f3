#include "ops/library_call.h"

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

}  // namespace tessera::ops
