#include "dsl/mpmd_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "jit/ir/printer.h"
#include "dsl/run_scoped.h"
#include "dsl/trace.h"
#include "jit/llvm/compiler.h"
#include "jit/lowering/canonicalize.h"
#include "jit/lowering/lowering.h"
#include "runtime/collective.h"
#include "runtime/interpreter/interpreter.h"
#include "runtime/launch.h"
#include "runtime/memory.h"

namespace tessera {

CoreMesh::CoreMesh(std::string name, int64_t cores, std::source_location l)
    : axis_name(std::move(name)), num_cores(cores), loc(l) {
  if (num_cores < 1 || axis_name.empty())
    throw UserError("a CoreMesh needs a non-empty axis name and at least one core",
                    fmt::format("CoreMesh(\"{}\", {})", axis_name, num_cores),
                    "give the axis a name and 1 or more cores: pl::CoreMesh(\"core\", 2)", loc);
}

namespace detail {

using ir::OpKind;

namespace {

// Scratch in a core's local memory is each participant's own; everything else is shared.
bool shared(const ScratchShape& s) {
  const MemorySpace space = s.memory().space;
  return space != MemorySpace::VMEM && space != MemorySpace::SMEM;
}

// One pair's kernel, traced for one signature of arguments, with the backend that runs it.
struct PairProgram {
  ir::Function traced, lowered;
  std::unique_ptr<rt::Interpreter> interpreter;
  std::shared_ptr<const jit::CompiledKernel> compiled;
};

struct Programs {
  std::vector<PairProgram> pairs;
};

// A participant: point `point` of pair `pair`'s mesh, member `member` of the launch group.
struct Participant {
  size_t pair;
  int64_t point;
  int64_t member;
};

}  // namespace

class MpmdImpl {
 public:
  explicit MpmdImpl(MpmdSpec spec) : spec_(std::move(spec)) {
    if (spec_.options.name.empty()) spec_.options.name = "kernel";
    name_ = spec_.options.name;
    interpreted_ = runs_interpreted(spec_.options);
    check_meshes();
    for (size_t p = 0; p < spec_.pairs.size(); ++p) {
      first_member_.push_back(members_);
      meshes_.push_back(std::make_shared<const Mesh>(spec_.pairs[p].mesh));
      members_ += spec_.pairs[p].mesh.size();
    }
  }

  std::vector<Array> run(std::span<const Array> args, SourceLoc loc);
  std::shared_ptr<const Programs> programs(std::span<const Array> args, SourceLoc loc);
  bool interpreted() const { return interpreted_; }

 private:
  [[noreturn]] void fail(std::string what, std::string given, std::string fix, SourceLoc loc) const {
    throw UserError(fmt::format("mpmd_map `{}`: {}", name_, what), std::move(given), std::move(fix), loc);
  }
  std::string mesh_str(size_t p) const {
    const MeshKernel& pair = spec_.pairs[p];
    return pair.of_cores ? fmt::format("CoreMesh(\"{}\", {})", pair.mesh.axis_names()[0], pair.mesh.size())
                         : pair.mesh.str();
  }
  // "function 1 (CoreMesh("core", 2)) at core=1"
  std::string participant_str(const Participant& who) const;
  void check_meshes() const;
  void validate(std::span<const Array> args, SourceLoc loc) const;
  ir::Function trace(size_t pair, std::span<const Array> args) const;
  std::string operand_name(size_t k, size_t inputs) const {
    return k < inputs ? fmt::format("input {}", k) : fmt::format("output {}", k - inputs);
  }
  // The outcome of the participant's kernel; throws its failure.
  void run_participant(const Participant& who, const PairProgram& prog, const std::vector<rt::Buffer*>& operands,
                       rt::LaunchGroup& group, rt::DeviceContext* outer) const;

  MpmdSpec spec_;
  std::string name_;
  bool interpreted_ = false;
  std::vector<std::shared_ptr<const Mesh>> meshes_;
  std::vector<int64_t> first_member_;  // by pair: the group member of its mesh's point 0
  int64_t members_ = 0;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Programs>> programs_;
};

std::string MpmdImpl::participant_str(const Participant& who) const {
  const Mesh& mesh = spec_.pairs[who.pair].mesh;
  const std::vector<int64_t> c = mesh.coords(who.point);
  std::vector<std::string> parts;
  for (size_t a = 0; a < c.size(); ++a) parts.push_back(fmt::format("{}={}", mesh.axis_names()[a], c[a]));
  return fmt::format("function {} ({}) at {}", who.pair, mesh_str(who.pair), fmt::join(parts, ", "));
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
  std::set<int> aliased;
  for (auto [in, out] : spec_.options.input_output_aliases) {
    if (in < 0 || in >= static_cast<int>(ni) || out < 0 || out >= static_cast<int>(no))
      fail("input_output_aliases names an input or output that does not exist",
           fmt::format("{{{}, {}}} with {} input(s) and {} output(s)", in, out, ni, no),
           "use an input index and an output index in range", loc);
    if (!aliased.insert(out).second)
      fail("two inputs alias the same output", fmt::format("output {}", out), "alias each output at most once", loc);
    const ShapeDtype& o = spec_.out_shapes[out];
    if (args[in].shape() != o.shape || args[in].dtype() != o.dtype)
      fail("an aliased input and output differ in shape or dtype",
           fmt::format("input {} is {} {}, output {} is {} {}", in, shape_tuple_str(args[in].shape()),
                       dtype_name(args[in].dtype()), out, shape_tuple_str(o.shape), dtype_name(o.dtype)),
           "alias arrays of the same shape and dtype", loc);
  }
  for (size_t k = 0; k < ns; ++k)
    if (!shared(spec_.scratch_shapes[k]))
      check_allocatable(spec_.scratch_shapes[k], fmt::format("scratch {}", k), fmt::format("mpmd_map `{}`", name_));
}

ir::Function MpmdImpl::trace(size_t pair, std::span<const Array> args) const {
  const size_t ni = args.size(), no = spec_.out_shapes.size();
  std::set<int> aliased_inputs;
  for (auto [in, out] : spec_.options.input_output_aliases) aliased_inputs.insert(in);
  // pl::axis_index and device ids resolve against the pair's own mesh.
  rt::DeviceContext device{meshes_[pair], 0, meshes_[pair]->coords(0), nullptr, 0, first_member_[pair]};
  rt::DeviceScope scope(&device);
  ir::Function fn;
  {
    TraceContext ctx(fn, name_);
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
    for (size_t k = 0; k < scratch.size(); ++k) {
      if (scratch[k]) continue;
      const MemoryRef& m = spec_.scratch_shapes[k].memory();
      const ir::ValueId v = ctx.emit_value(OpKind::Alloc, {}, Type::ref(m.dtype, m.shape, m.space),
                                           fmt::format("scratch {}", k), spec_.scratch_shapes[k].loc());
      b.set_name(v, fmt::format("scratch {}", k));
      scratch[k] = Ref::wrap(ctx, v);
    }
    for (auto& s : scratch) operands.push_back(*s);
    spec_.pairs[pair].kernel.fn(operands);
  }
  return passes::remove_dead_code(fn);
}

std::shared_ptr<const Programs> MpmdImpl::programs(std::span<const Array> args, SourceLoc loc) {
  std::lock_guard lock(mutex_);
  std::string key;
  for (const Array& a : args) key += fmt::format("{}[{}];", dtype_name(a.dtype()), fmt::join(a.shape(), ","));
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;
  validate(args, loc);
  auto progs = std::make_shared<Programs>();
  progs->pairs.resize(spec_.pairs.size());  // the interpreters keep references into them: no reallocation
  for (size_t p = 0; p < spec_.pairs.size(); ++p) {
    PairProgram& prog = progs->pairs[p];
    prog.traced = trace(p, args);
    passes::LoweringOptions lo;
    lo.vmem_limit_bytes = spec_.options.compiler_params.vmem_limit_bytes.value_or(lo.vmem_limit_bytes);
    lo.call_site = spec_.loc;
    prog.lowered = passes::lower(prog.traced, lo);
    if (spec_.options.debug)
      std::fprintf(stderr, "// ---- mpmd_map `%s`, function %zu: traced ----\n%s// ---- lowered ----\n%s", name_.c_str(), p,
                   ir::print(prog.traced).c_str(), ir::print(prog.lowered).c_str());
    if (interpreted_) {
      rt::InterpretOptions io;
      if (spec_.options.interpret)
        io.zero_uninitialized = spec_.options.interpret->uninitialized_memory == UninitializedMemory::zero;
      prog.interpreter = std::make_unique<rt::Interpreter>(prog.lowered, io);
    } else {
      prog.compiled = jit::compile(prog.lowered, spec_.options.compiler_params.target, spec_.loc);
    }
  }
  programs_.emplace(key, progs);
  return progs;
}

void MpmdImpl::run_participant(const Participant& who, const PairProgram& prog,
                               const std::vector<rt::Buffer*>& operands, rt::LaunchGroup& group,
                               rt::DeviceContext* outer) const {
  const MeshKernel& pair = spec_.pairs[who.pair];
  rt::DeviceContext device{meshes_[who.pair], who.point, pair.mesh.coords(who.point), nullptr, 0,
                           first_member_[who.pair]};
  // A device mesh's points are devices (named by their coordinates on timelines); a core mesh's are
  // cores of the device the mpmd_map runs on.
  rt::DeviceScope scope(pair.of_cores ? outer : &device);
  const int64_t device_id = pair.of_cores ? (outer ? outer->logical : 0) : who.point;
  rt::Launch launch(static_cast<int>(device_id), name_);
  rt::CoreContext ctx(launch, static_cast<int>(who.member), &prog.lowered);
  ctx.point.grid_point = device.coords;  // the grid is the mesh
  ctx.device = &device;
  if (const auto& ip = spec_.options.interpret)
    ctx.dma.configure(ip->dma_execution_mode == DmaExecutionMode::on_wait ? rt::DmaMode::on_wait : rt::DmaMode::eager,
                      ip->random_seed + static_cast<uint64_t>(who.member));
  std::vector<void*> pointers;
  for (size_t k = 0; k < operands.size(); ++k) {
    rt::Buffer& b = *operands[k];
    const int64_t bytes = num_elements(b.shape) * dtype_size(b.dtype);
    ctx.add_region(-1 - static_cast<int64_t>(k), b.data(), bytes);
    if (is_semaphore(b.dtype))
      ctx.dma.add_semaphores(reinterpret_cast<const int64_t*>(b.data()), num_elements(b.shape), b.dtype, b.name, false);
    pointers.push_back(const_cast<std::byte*>(b.data()));
  }
  const rt::GroupMembership member(&group, rt::Seat{who.member, 0}, ctx);
  if (prog.interpreter) {
    std::vector<rt::Value> params;
    for (rt::Buffer* b : operands) params.emplace_back(rt::RefView::whole(*b));
    prog.interpreter->run(ctx, std::move(params));
  } else {
    // Compiled copies are eager in a group: none is left pending when the kernel returns.
    prog.compiled->entry()(pointers.data(), 0, 0, &ctx);
    if (ctx.fault) throw *ctx.fault;
  }
}

std::vector<Array> MpmdImpl::run(std::span<const Array> args, SourceLoc loc) {
  const std::shared_ptr<const Programs> progs = programs(args, loc);
  const size_t ni = args.size(), no = spec_.out_shapes.size();
  const bool zero = spec_.options.interpret && spec_.options.interpret->uninitialized_memory == UninitializedMemory::zero;
  // The shared memory: inputs read in place, fresh outputs (or copies of their aliased inputs) and
  // shared scratch, poisoned in both backends (semaphores start at zero).
  std::vector<std::unique_ptr<rt::Buffer>> buffers;
  std::vector<rt::Buffer*> operands;
  for (size_t k = 0; k < ni; ++k)
    operands.push_back(
        buffers.emplace_back(std::make_unique<rt::Buffer>(operand_name(k, ni), args[k], MemorySpace::ANY, false)).get());
  for (size_t o = 0; o < no; ++o) {
    const ShapeDtype& sd = spec_.out_shapes[o];
    std::unique_ptr<rt::Buffer> b;
    for (auto [in, out] : spec_.options.input_output_aliases)
      if (out == static_cast<int>(o)) b = std::make_unique<rt::Buffer>(operand_name(ni + o, ni), args[in], MemorySpace::ANY, true);
    if (!b) b = rt::make_buffer(operand_name(ni + o, ni), sd.dtype, sd.shape, MemorySpace::ANY, zero);
    operands.push_back(buffers.emplace_back(std::move(b)).get());
  }
  for (auto [in, out] : spec_.options.input_output_aliases) operands[in] = operands[ni + out];
  std::vector<size_t> shared_scratch;
  for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k) {
    if (!shared(spec_.scratch_shapes[k])) continue;
    const MemoryRef& m = spec_.scratch_shapes[k].memory();
    shared_scratch.push_back(k);
    operands.push_back(
        buffers.emplace_back(rt::make_buffer(fmt::format("scratch {}", k), m.dtype, m.shape, m.space, zero)).get());
  }

  std::vector<Participant> participants;
  std::vector<std::string> names;
  for (size_t p = 0; p < spec_.pairs.size(); ++p)
    for (int64_t point = 0; point < spec_.pairs[p].mesh.size(); ++point) {
      participants.push_back(Participant{p, point, first_member_[p] + point});
      names.push_back(participant_str(participants.back()));
    }
  rt::LaunchGroup group(std::move(names), fmt::format("mpmd_map `{}`", name_),
                        rt::LaunchKey{name_, std::nullopt, spec_.loc}, 1, /*entry_barrier=*/false);

  // Every participant on a thread of its own (the first on the caller's): they may block on each other.
  rt::DeviceContext* outer = rt::current_device();
  std::vector<std::exception_ptr> errors(participants.size());
  std::vector<int64_t> error_order(participants.size(), 0);
  std::atomic<int64_t> next_error{1};
  auto body = [&](size_t i) {
    try {
      run_participant(participants[i], progs->pairs[participants[i].pair], operands, group, outer);
    } catch (...) {
      errors[i] = std::current_exception();
      error_order[i] = next_error++;
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < participants.size(); ++i) threads.emplace_back(body, i);
  body(0);
  for (std::thread& t : threads) t.join();
  // A participant's own failure is the cause; the deadlock report of the ones left waiting for it is
  // a consequence (and the cause when there is nothing else). Of several, the first to fail.
  const std::optional<std::string> deadlock = group.failure();
  auto consequence = [&](size_t i) {
    try {
      std::rethrow_exception(errors[i]);
    } catch (const RuntimeError& e) {
      return deadlock && e.problem() == *deadlock;
    } catch (...) {
      return false;
    }
  };
  size_t first = participants.size();
  for (size_t i = 0; i < participants.size(); ++i) {
    if (!errors[i]) continue;
    if (first == participants.size() || std::pair(consequence(i), error_order[i]) < std::pair(consequence(first), error_order[first]))
      first = i;
  }
  if (first < participants.size()) {
    try {
      std::rethrow_exception(errors[first]);
    } catch (const RuntimeError& e) {
      throw RuntimeError(fmt::format("mpmd_map `{}`, {}: {}", name_, participant_str(participants[first]), e.problem()),
                         e.where(), e.loc());
    }
  }
  // The shared semaphores outlive every participant's kernel: they must be back at zero at the end.
  for (size_t j = 0; j < shared_scratch.size(); ++j) {
    const rt::Buffer& b = *operands[ni + no + j];
    if (!is_semaphore(b.dtype)) continue;
    const auto* sems = reinterpret_cast<const int64_t*>(b.data());
    for (int64_t i = 0; i < num_elements(b.shape); ++i) {
      if (sems[i] == 0) continue;
      const bool dma = b.dtype == DType::dma_sem;
      throw RuntimeError(
          fmt::format("{} `{}`{} is {} when mpmd_map `{}` ends: a semaphore the participants share must be back at zero "
                      "by then ({}). Wait for every copy that signals it, and wait on a regular semaphore for everything "
                      "signalled to it",
                      dma ? "DMA semaphore" : "semaphore", b.name, b.shape.empty() ? "" : fmt::format("[{}]", i), sems[i],
                      name_,
                      dma ? fmt::format("a DMA semaphore counts bytes: {} bytes of copies were never waited for", sems[i])
                          : fmt::format("{} signalled that no semaphore_wait took", sems[i])),
          ExecutionPoint{static_cast<int>(outer ? outer->logical : 0), 0, {}, {}},
          spec_.scratch_shapes[shared_scratch[j]].loc());
    }
  }
  std::vector<Array> outs;
  for (size_t o = 0; o < no; ++o) outs.push_back(operands[ni + o]->array());
  return outs;
}

bool mpmd_interpreted(const MpmdImpl& call) { return call.interpreted(); }

std::shared_ptr<MpmdImpl> make_mpmd(MpmdSpec spec) { return std::make_shared<MpmdImpl>(std::move(spec)); }

std::vector<Array> run_mpmd(MpmdImpl& call, std::span<const Array> args, SourceLoc loc) { return call.run(args, loc); }

const ir::Function& mpmd_ir(MpmdImpl& call, std::span<const Array> args, size_t pair, SourceLoc loc) {
  auto progs = call.programs(args, loc);  // programs live as long as the call
  return progs->pairs.at(pair).traced;
}

}  // namespace detail
}  // namespace tessera
