#include "jit/lowering/lowering.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "jit/ir/printer.h"
#include "jit/ir/verifier.h"
#include "jit/lowering/canonicalize.h"
#include "jit/lowering/expand_pipelines.h"
#include "jit/lowering/fuse_dot_accumulate.h"
#include "jit/lowering/memory_budget.h"
#include "runtime/config.h"

namespace tessera::passes {

using ir::Function;

namespace {

struct Pass {
  std::string name;
  std::function<Function(const Function&, const LoweringOptions&)> run;
};

const std::vector<Pass>& passes() {
  static const std::vector<Pass> list = {
      {"canonicalize", [](const Function& f, const LoweringOptions&) { return canonicalize(f); }},
      {"expand_pipelines",
       [](const Function& f, const LoweringOptions& o) { return expand_pipelines(f, o.outputs_in_place); }},
      {"canonicalize", [](const Function& f, const LoweringOptions&) { return canonicalize(f); }},
      {"fuse_dot_accumulate", [](const Function& f, const LoweringOptions&) { return fuse_dot_accumulate(f); }},
      {"check_vmem_budget",
       [](const Function& f, const LoweringOptions& o) {
         check_vmem_budget(f, o.vmem_limit_bytes, o.call_site);
         return f;
       }},
  };
  return list;
}

void dump(const Function& fn, const std::string& stage) {
  std::string text = ir::print(fn);
  std::fprintf(stderr, "// ---- tessera IR of `%s` %s ----\n%s", fn.name.c_str(), stage.c_str(), text.c_str());
  std::fflush(stderr);
}

}  // namespace

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Pass& p : passes()) n.push_back(p.name);
    return n;
  }();
  return names;
}

Function lower(const Function& traced, const LoweringOptions& options) {
  const std::string_view dump_setting = config::dump_ir();
  const bool dump_all = dump_setting == "all";
  const bool time = config::time_passes();
  if (dump_setting == "1" || dump_all) dump(traced, "as traced");
  ir::verify(traced, "tracing");

  Function cur = traced;
  std::vector<std::pair<std::string, double>> times;
  for (const Pass& pass : passes()) {
    auto start = std::chrono::steady_clock::now();
    cur = pass.run(cur, options);
    times.emplace_back(pass.name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    ir::verify(cur, pass.name);
    if (dump_all || dump_setting == pass.name) dump(cur, "after " + pass.name);
  }
  if (time) {
    std::string table = fmt::format("// ---- tessera pass times for `{}` ----\n", traced.name);
    for (auto& [name, ms] : times) table += fmt::format("//   {:<20} {:8.3f} ms\n", name, ms);
    std::fputs(table.c_str(), stderr);
  }
  return cur;
}

}  // namespace tessera::passes
