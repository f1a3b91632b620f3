#include "dsl/shard_map.h"

#include <fmt/format.h>

#include "runtime/launch.h"
#include "runtime/mesh.h"
#include "runtime/timeline.h"

namespace tessera::detail {

std::vector<ShardedArray> run_shard_map(const ShardMapSpec& spec, int arity,
                                        const std::function<std::vector<Array>(std::vector<Array>&)>& f,
                                        const std::vector<ShardArg>& args) {
  const Mesh& mesh = *spec.mesh;
  if (args.size() != spec.in_specs.size() || arity != static_cast<int>(args.size()))
    throw UserError("pl::shard_map: the function, its in_specs and the arguments disagree in number",
                    fmt::format("a function of {} array(s), {} in_specs, called with {} argument(s)", arity,
                                spec.in_specs.size(), args.size()),
                    "give one in_spec per argument of the function, and call it with that many arrays", spec.loc);
  // Every device's blocks of the arguments.
  std::vector<ShardedArray> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    NamedSharding sharding(spec.mesh, spec.in_specs[i]);
    const auto& a = args[i].get();
    if (const auto* s = std::get_if<ShardedArray>(&a);
        s && s->sharding().mesh() == mesh && s->sharding().spec().str() == spec.in_specs[i].str()) {
      inputs.push_back(*s);
      continue;
    }
    const Array whole = std::holds_alternative<Array>(a) ? std::get<Array>(a) : std::get<ShardedArray>(a).gather();
    sharding.check(whole.shape(), fmt::format("pl::shard_map input {}", i), spec.loc);
    inputs.push_back(device_put(whole, sharding));
  }

  // f on every device, each on a thread of its own with its device current.
  const int64_t n = mesh.size();
  std::vector<std::vector<Array>> results(static_cast<size_t>(n));
  rt::run_on_devices(spec.mesh, [&](int64_t d) {
    rt::timeline::Scope span(rt::timeline::Track::host(), "shard_map", "scope");
    std::vector<Array> local;
    for (const ShardedArray& in : inputs) local.push_back(in.shard(d));
    results[d] = f(local);
  });

  // Assemble each output from the devices' blocks.
  std::vector<ShardedArray> outputs;
  const size_t count = results[0].size();
  if (count != spec.out_specs.size())
    throw UserError("pl::shard_map: the function returns another number of arrays than there are out_specs",
                    fmt::format("{} array(s) for {} out_specs", count, spec.out_specs.size()),
                    "give one out_spec per array the function returns", spec.loc);
  for (size_t o = 0; o < count; ++o) {
    const Array& first_block = results[0][o];
    for (int64_t d = 1; d < n; ++d) {
      const Array& b = results[d][o];
      if (b.shape() != first_block.shape() || b.dtype() != first_block.dtype())
        throw UserError(fmt::format("pl::shard_map: the devices return blocks of different shapes for output {}", o),
                        fmt::format("{} returns {} {}, {} returns {} {}", mesh.device_str(0),
                                    shape_tuple_str(first_block.shape()), dtype_name(first_block.dtype()),
                                    mesh.device_str(d), shape_tuple_str(b.shape()), dtype_name(b.dtype())),
                        "return blocks of one shape and dtype from every device", spec.loc);
    }
    NamedSharding sharding(spec.mesh, spec.out_specs[o]);
    Shape shape = first_block.shape();
    if (spec.out_specs[o].dims().size() > shape.size())
      throw UserError(fmt::format("pl::shard_map: out_spec {} has more dims than output {}", o, o),
                      fmt::format("{} for blocks of shape {}", spec.out_specs[o].str(), shape_tuple_str(shape)),
                      "give at most one entry per dim of the returned arrays", spec.loc);
    const std::vector<int64_t> blocks = sharding.blocks(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) shape[i] *= blocks[i];
    sharding.check(shape, fmt::format("pl::shard_map output {}", o), spec.loc);
    std::vector<Array> shards;
    for (int64_t d = 0; d < n; ++d) shards.push_back(results[d][o]);
    outputs.emplace_back(sharding, shape, first_block.dtype(), std::move(shards));
  }
  return outputs;
}

}  // namespace tessera::detail
