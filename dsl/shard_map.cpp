#include "dsl/shard_map.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/launch.h"
#include "runtime/mesh.h"
#include "runtime/timeline.h"
#include "runtime/transport.h"

namespace tessera::detail {

namespace {

// ---- blocks as bytes, for processes that exchange them ----

void put_word(std::string& out, int64_t w) { out.append(reinterpret_cast<const char*>(&w), sizeof w); }
int64_t take_word(const std::string& in, size_t& at) {
  int64_t w;
  std::memcpy(&w, in.data() + at, sizeof w);
  at += sizeof w;
  return w;
}

// Under a transport of several processes every process ran only its own devices: each sends the
// blocks its devices returned to all the others (one all-gather of every output, the whole result
// replicated on every process), so that every process holds every device's blocks afterwards.
void share_blocks(rt::Transport& transport, std::vector<std::vector<Array>>& results, int64_t first, int64_t last) {
  std::string mine;
  for (int64_t d = first; d < last; ++d) {
    put_word(mine, static_cast<int64_t>(results[d].size()));
    for (const Array& a : results[d]) {
      put_word(mine, static_cast<int64_t>(a.dtype()));
      put_word(mine, a.rank());
      for (int64_t e : a.shape()) put_word(mine, e);
      mine.append(reinterpret_cast<const char*>(a.data()), static_cast<size_t>(a.nbytes()));
    }
  }
  const std::vector<std::string> all = transport.exchange(std::move(mine));
  const int64_t n = static_cast<int64_t>(results.size());
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    if (p == transport.process_index()) continue;
    const auto [lo, hi] = rt::process_devices(n, p, static_cast<int>(all.size()));
    size_t at = 0;
    for (int64_t d = lo; d < hi; ++d) {
      const int64_t outputs = take_word(all[p], at);
      for (int64_t o = 0; o < outputs; ++o) {
        const auto dtype = static_cast<DType>(take_word(all[p], at));
        Shape shape(static_cast<size_t>(take_word(all[p], at)));
        for (int64_t& e : shape) e = take_word(all[p], at);
        Array a = Array::empty(shape, dtype);
        std::memcpy(a.mutable_data(), all[p].data() + at, static_cast<size_t>(a.nbytes()));
        at += static_cast<size_t>(a.nbytes());
        results[d].push_back(std::move(a));
      }
    }
  }
}

}  // namespace

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
  if (rt::Transport& transport = rt::process_transport(); transport.process_count() > 1) {
    const auto [first, last] = transport.local_devices(n);
    share_blocks(transport, results, first, last);
  }

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
