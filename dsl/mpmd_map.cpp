#include "dsl/mpmd_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "dsl/program.h"
#include "dsl/run_scoped.h"
#include "dsl/trace.h"
#include "jit/lowering/canonicalize.h"
#include "runtime/config.h"
#include "runtime/launch.h"

namespace tessera {

CoreMesh::CoreMesh(std::string name, int64_t cores, std::source_location l)
    : axis_name(std::move(name)), num_cores(cores), loc(l) {
  if (num_cores < 1 || axis_name.empty())
    throw UserError("a CoreMesh needs a non-empty axis name and at least one core",
                    fmt::format("CoreMesh(\"{}\", {})", axis_name, num_cores),
                    "give the axis a name and 1 or more cores: pl::CoreMesh(\"core\", 2)", loc);
}

Mesh MeshKernel::devices_and_cores(const Mesh& devices, const CoreMesh& cores) {
  std::vector<int64_t> shape = devices.shape();
  std::vector<std::string> names = devices.axis_names();
  if (std::find(names.begin(), names.end(), cores.axis_name) != names.end())
    throw UserError(fmt::format("the cores' axis `{}` is also an axis of the device mesh", cores.axis_name),
                    fmt::format("{} with CoreMesh(\"{}\", {})", devices.str(), cores.axis_name, cores.num_cores),
                    "give the cores' axis a name of its own", cores.loc);
  shape.push_back(cores.num_cores);
  names.push_back(cores.axis_name);
  return Mesh(std::move(shape), std::move(names), cores.loc);
}

namespace detail {

namespace {

// Scratch in a core's local memory is each participant's own; everything else is shared.
bool shared(const ScratchShape& s) {
  const MemorySpace space = s.memory().space;
  return space != MemorySpace::VMEM && space != MemorySpace::SMEM;
}

// Every pair's kernel, traced for one signature of arguments, and the participants that run them.
struct Programs {
  std::vector<Program> pairs;
  std::vector<rt::Participant> participants;
  std::vector<rt::Participant> references;  // differential mode: the same participants, interpreted
};

}  // namespace

class MpmdImpl : public CallBase {
 public:
  explicit MpmdImpl(MpmdSpec spec) : CallBase("mpmd_map", spec.options, spec.loc), spec_(std::move(spec)) {
    check_meshes();
    for (size_t p = 0; p < spec_.pairs.size(); ++p) {
      first_member_.push_back(members_);
      meshes_.push_back(std::make_shared<const Mesh>(spec_.pairs[p].mesh));
      members_ += spec_.pairs[p].mesh.size();
    }
  }

  std::vector<Array> run(std::span<const Array> args, SourceLoc loc);
  std::shared_ptr<const Programs> programs(std::span<const Array> args, SourceLoc loc);

 private:
  std::string mesh_str(size_t p) const {
    const MeshKernel& pair = spec_.pairs[p];
    if (pair.core_axis >= 0) {
      const std::vector<int64_t>& shape = pair.mesh.shape();
      const std::vector<std::string>& names = pair.mesh.axis_names();
      const Mesh devices({shape.begin(), shape.end() - 1}, {names.begin(), names.end() - 1});
      return fmt::format("{} with CoreMesh(\"{}\", {})", devices.str(), names.back(), shape.back());
    }
    return pair.of_cores ? fmt::format("CoreMesh(\"{}\", {})", pair.mesh.axis_names()[0], pair.mesh.size())
                         : pair.mesh.str();
  }
  // "function 1 (CoreMesh("core", 2)) at core=1"
  std::string participant_str(size_t pair, int64_t point) const;
  void check_meshes() const;
  void validate(std::span<const Array> args, SourceLoc loc) const;
  // `outer`: the shard_map device the call runs on, whose mesh axes the kernels may read, or null.
  ir::Function trace(size_t pair, std::span<const Array> args, const rt::DeviceContext* outer) const;
  std::string operand_name(size_t k, size_t inputs) const {
    return k < inputs ? fmt::format("input {}", k) : fmt::format("output {}", k - inputs);
  }

  MpmdSpec spec_;
  std::vector<std::shared_ptr<const Mesh>> meshes_;
  std::vector<int64_t> first_member_;  // by pair: the group member of its mesh's point 0
  int64_t members_ = 0;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Programs>> programs_;
};

std::string MpmdImpl::participant_str(size_t pair, int64_t point) const {
  const Mesh& mesh = spec_.pairs[pair].mesh;
  const std::vector<int64_t> c = mesh.coords(point);
  std::vector<std::string> parts;
  for (size_t a = 0; a < c.size(); ++a) parts.push_back(fmt::format("{}={}", mesh.axis_names()[a], c[a]));
  return fmt::format("function {} ({}) at {}", pair, mesh_str(pair), fmt::join(parts, ", "));
}

void MpmdImpl::check_meshes() const {
  if (spec_.pairs.empty())
    fail("at least one mesh/function pair is required", "an empty list of (mesh, kernel) pairs",
         "pass {{mesh, kernel}, ...}: each kernel runs at every point of its mesh", spec_.loc);
  // An axis named in several meshes is one axis of the chip (the cores every mesh spans).
  std::map<std::string, std::pair<int64_t, size_t>> axes;  // name -> size, first pair naming it
  for (size_t p = 0; p < spec_.pairs.size(); ++p) {
    const Mesh& mesh = spec_.pairs[p].mesh;
    for (size_t a = 0; a < mesh.shape().size(); ++a) {
      auto [it, fresh] = axes.emplace(mesh.axis_names()[a], std::pair{mesh.shape()[a], p});
      if (!fresh && it->second.first != mesh.shape()[a])
        fail(fmt::format("conflicting size for axis `{}`", it->first),
             fmt::format("function {}'s mesh {} gives it {}, function {}'s mesh {} gives it {}", it->second.second,
                         mesh_str(it->second.second), it->second.first, p, mesh_str(p), mesh.shape()[a]),
             "an axis named in several meshes is the same axis: give it one size, or name the axes differently",
             spec_.pairs[p].loc);
    }
  }
  if (!spec_.options.compiler_params.dimension_semantics.empty())
    fail("dimension_semantics must be empty: the grid of an mpmd_map is its meshes, every point runs at once",
         fmt::format("{} entries", spec_.options.compiler_params.dimension_semantics.size()),
         "leave compiler_params.dimension_semantics unset", spec_.loc);
}

void MpmdImpl::validate(std::span<const Array> args, SourceLoc loc) const {
  const size_t ni = args.size(), no = spec_.out_shapes.size(), ns = spec_.scratch_shapes.size();
  for (size_t p = 0; p < spec_.pairs.size(); ++p)
    if (spec_.pairs[p].kernel.arity != static_cast<int>(ni + no + ns))
      fail(fmt::format("function {} takes a different number of refs than the mpmd_map provides", p),
           fmt::format("a kernel of {} pl::Ref parameter(s); the mpmd_map provides {} = {} input(s) + {} output(s) + {} "
                       "scratch",
                       spec_.pairs[p].kernel.arity, ni + no + ns, ni, no, ns),
           "make every kernel take one pl::Ref per input, output and scratch buffer, in that order", spec_.pairs[p].loc);
  check_out_shapes(spec_.out_shapes);
  check_num_schedules(spec_.options, spec_.loc);
  // Semaphore arrays pass between pallas_calls (docs/design.md §4.9); participants share scratch ones.
  for (size_t k = 0; k < ni + no; ++k) {
    const bool input = k < ni;
    const DType d = input ? args[k].dtype() : spec_.out_shapes[k - ni].dtype;
    if (is_semaphore(d))
      fail(fmt::format("{} {} is an array of semaphores, which an mpmd_map does not take", input ? "input" : "output",
                       input ? k : k - ni),
           fmt::format("a {} {} array", shape_tuple_str(input ? args[k].shape() : spec_.out_shapes[k - ni].shape),
                       dtype_name(d)),
           "share semaphores between the participants as scratch (a pl::SemaphoreType in scratch_shapes); semaphore "
           "arrays pass between pallas_calls",
           input ? loc : spec_.out_shapes[k - ni].loc);
  }
  check_aliases(spec_.options.input_output_aliases, args, std::nullopt, spec_.out_shapes, loc);
  for (size_t k = 0; k < ns; ++k)
    if (!shared(spec_.scratch_shapes[k]))
      check_allocatable(spec_.scratch_shapes[k], fmt::format("scratch {}", k), title());
}

ir::Function MpmdImpl::trace(size_t pair, std::span<const Array> args, const rt::DeviceContext* outer) const {
  const size_t ni = args.size(), no = spec_.out_shapes.size();
  std::set<int> aliased_inputs;
  for (auto [in, out] : spec_.options.input_output_aliases) aliased_inputs.insert(in);
  // pl::axis_index and device ids resolve against the pair's own mesh.
  rt::DeviceContext device{meshes_[pair], 0, meshes_[pair]->coords(0), nullptr, 0, first_member_[pair]};
  device.outer = outer;
  rt::DeviceScope scope(&device);
  ir::Function fn;
  {
    TraceContext ctx(fn, name_);
    ctx.call = "mpmd_map";
    ctx.core_mesh = spec_.pairs[pair].of_cores || spec_.pairs[pair].core_axis >= 0;
    ctx.core_axis = spec_.pairs[pair].core_axis;
    // A participant's barrier semaphore (pl::get_barrier_semaphore) is its own, as its VMEM scratch is:
    // remote signals over the kernel's mesh reach the other participants' ones.
    ctx.collective_id = spec_.options.compiler_params.collective_id;
    ir::Builder& b = ctx.builder();
    // Parameters: the inputs, the outputs, then the shared scratch; the participant's own scratch is
    // allocated in the kernel, as pallas_call's is.
    std::vector<Ref> operands;
    for (size_t k = 0; k < ni + no; ++k) {
      const ShapeDtype sd = k < ni ? ShapeDtype(args[k].shape(), args[k].dtype()) : spec_.out_shapes[k - ni];
      const ir::ValueId v = b.add_param(Type::ref(sd.dtype, sd.shape, MemorySpace::ANY), operand_name(k, ni));
      if (k < ni && !aliased_inputs.count(static_cast<int>(k))) ctx.read_only.insert(v);
      operands.push_back(Ref::wrap(ctx, v));
    }
    std::vector<std::optional<Ref>> scratch(spec_.scratch_shapes.size());
    for (size_t k = 0; k < scratch.size(); ++k) {
      if (!shared(spec_.scratch_shapes[k])) continue;
      const MemoryRef& m = spec_.scratch_shapes[k].memory();
      scratch[k] = Ref::wrap(ctx, b.add_param(Type::ref(m.dtype, m.shape, m.space), fmt::format("scratch {}", k)));
    }
    for (size_t k = 0; k < scratch.size(); ++k)
      if (!scratch[k]) scratch[k] = trace_scratch(ctx, spec_.scratch_shapes[k], k);
    for (auto& s : scratch) operands.push_back(*s);
    spec_.pairs[pair].kernel.fn(operands);
  }
  return passes::remove_dead_code(fn);
}

std::shared_ptr<const Programs> MpmdImpl::programs(std::span<const Array> args, SourceLoc loc) {
  check_not_tracing(loc);  // before the lock, which the trace of this very call may hold
  std::lock_guard lock(mutex_);
  std::string key;
  for (const Array& a : args) key += fmt::format("{}[{}];", dtype_name(a.dtype()), fmt::join(a.shape(), ","));
  // Called inside pl::shard_map (core_map under shard_map), the kernels read the device's coordinates
  // on the shard_map's mesh as numbers of the trace: one program per device.
  const rt::DeviceContext* outer = rt::current_device();
  if (outer) key += fmt::format("{}@{}", outer->mesh->str(), fmt::join(outer->coords, ","));
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;
  validate(args, loc);
  if (outer)
    for (size_t p = 0; p < spec_.pairs.size(); ++p)
      for (const std::string& name : spec_.pairs[p].mesh.axis_names())
        if (std::find(outer->mesh->axis_names().begin(), outer->mesh->axis_names().end(), name) !=
            outer->mesh->axis_names().end())
          fail(fmt::format("axis `{}` of function {}'s mesh is also an axis of the shard_map's mesh", name, p),
               fmt::format("{} inside pl::shard_map over {}", mesh_str(p), outer->mesh->str()),
               "give the cores' axis a name of its own, so that every name means one axis", spec_.pairs[p].loc);
  // Every kernel takes the same operands: the inputs, the outputs, then the shared scratch.
  const size_t ni = args.size(), no = spec_.out_shapes.size();
  std::vector<rt::OperandInfo> operands;
  for (size_t k = 0; k < ni + no; ++k) {
    const ShapeDtype sd = k < ni ? ShapeDtype(args[k].shape(), args[k].dtype()) : spec_.out_shapes[k - ni];
    operands.push_back(rt::OperandInfo{operand_name(k, ni), k < ni ? rt::OperandRole::input : rt::OperandRole::output,
                                       sd.dtype, sd.shape, MemorySpace::ANY, spec_.loc});
  }
  for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k) {
    if (!shared(spec_.scratch_shapes[k])) continue;
    const MemoryRef& m = spec_.scratch_shapes[k].memory();
    operands.push_back(rt::OperandInfo{fmt::format("scratch {}", k), rt::OperandRole::scratch, m.dtype, m.shape, m.space,
                                       spec_.scratch_shapes[k].loc()});
  }
  auto progs = std::make_shared<Programs>();
  progs->pairs.resize(spec_.pairs.size());
  for (size_t p = 0; p < spec_.pairs.size(); ++p) {
    Program& prog = progs->pairs[p];
    prog.traced = trace(p, args, outer);
    auto executable = [&](bool interpreted) {
      auto exe = std::make_shared<rt::Executable>();
      exe->key = rt::LaunchKey{name_, spec_.options.compiler_params.collective_id, spec_.loc};
      exe->operands = operands;
      exe->aliases.assign(spec_.options.input_output_aliases.begin(), spec_.options.input_output_aliases.end());
      build_executable(*exe, prog.traced, spec_.options, interpreted, fmt::format("{}, function {}", title(), p));
      return exe;
    };
    prog.exe = executable(interpreted());
    if (checks_against_interpreter()) prog.reference = executable(true);
  }
  // Every point of every mesh, in order: participant i is member i of the launch group.
  for (size_t p = 0; p < spec_.pairs.size(); ++p) {
    const MeshKernel& pair = spec_.pairs[p];
    for (int64_t point = 0; point < pair.mesh.size(); ++point) {
      rt::Participant participant{progs->pairs[p].exe.get(), participant_str(p, point),
                                  rt::DeviceContext{meshes_[p], point, pair.mesh.coords(point), nullptr, 0, first_member_[p]},
                                  !pair.of_cores};
      if (checks_against_interpreter()) {
        progs->references.push_back(participant);
        progs->references.back().exe = progs->pairs[p].reference.get();
      }
      progs->participants.push_back(std::move(participant));
    }
  }
  programs_.emplace(key, progs);
  return progs;
}

std::vector<Array> MpmdImpl::run(std::span<const Array> args, SourceLoc loc) {
  const std::shared_ptr<const Programs> progs = programs(args, loc);
  // Schedule exploration: the whole group of participants under each seed (no grid: no block writes).
  if (const auto& ip = spec_.options.interpret; ip && ip->num_schedules > 1)
    return explore_schedules(
        [&](const rt::LaunchOptions& options) {
          return rt::launch_together(title(), progs->participants, args, {.seed = options.seed});
        },
        ip->random_seed, ip->num_schedules, 0, title(), loc);
  std::vector<Array> outs = rt::launch_together(title(), progs->participants, args);
  if (!progs->references.empty())
    compare_with_interpreter(outs, rt::launch_together(title(), progs->references, args), nullptr, 0,
                             spec_.options.check_tolerance, title(), loc);
  return outs;
}

bool mpmd_interpreted(const MpmdImpl& call) { return call.interpreted(); }

std::shared_ptr<MpmdImpl> make_mpmd(MpmdSpec spec) { return std::make_shared<MpmdImpl>(std::move(spec)); }

// As run_call: an invalid setting its compile or launch reads is reported at `loc`.
std::vector<Array> run_mpmd(MpmdImpl& call, std::span<const Array> args, SourceLoc loc) {
  const config::CallSite site(loc);
  return call.run(args, loc);
}

const ir::Function& mpmd_ir(MpmdImpl& call, std::span<const Array> args, size_t pair, SourceLoc loc) {
  const config::CallSite site(loc);
  auto progs = call.programs(args, loc);  // programs live as long as the call
  return progs->pairs.at(pair).traced;
}

}  // namespace detail
}  // namespace tessera
