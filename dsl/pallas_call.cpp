#include "dsl/pallas_call.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "jit/ir/printer.h"
#include "dsl/pipeline_trace.h"
#include "dsl/run_scoped.h"
#include "dsl/trace.h"
#include "jit/lowering/canonicalize.h"
#include "jit/llvm/compiler.h"
#include "jit/lowering/lowering.h"
#include "runtime/config.h"
#include "runtime/interpreter/interpreter.h"
#include "runtime/collective.h"
#include "runtime/launch.h"
#include "runtime/mesh.h"
#include "runtime/memory.h"
#include "runtime/thread_pool.h"

namespace tessera {

IndexArg::operator Value() const {
  if (const Value* v = std::get_if<Value>(&arg_)) return *v;
  throw UserError(fmt::format("index map parameter {} is declared pl::Value but receives a scalar-prefetch ref", position_),
                  "an index map whose parameters do not match: grid indices first, then scalar-prefetch refs",
                  "declare the grid indices as pl::Value and the scalar-prefetch refs after them as pl::Ref", spec_);
}

IndexArg::operator Ref() const {
  if (const Ref* r = std::get_if<Ref>(&arg_)) return *r;
  throw UserError(fmt::format("index map parameter {} is declared pl::Ref but receives a grid index", position_),
                  "an index map whose parameters do not match: grid indices first, then scalar-prefetch refs",
                  "declare the grid indices as pl::Value and the scalar-prefetch refs after them as pl::Ref", spec_);
}

Operand::Operand(const IndexArg& v, std::source_location loc) : value_(static_cast<Value>(v)), loc_(loc) {}

namespace detail {

using ir::OpKind;

namespace {

std::string operand_name(int num_prefetch, int num_inputs, int k) {
  if (k < num_prefetch) return fmt::format("scalar prefetch {}", k);
  if (k < num_prefetch + num_inputs) return fmt::format("input {}", k - num_prefetch);
  return fmt::format("output {}", k - num_prefetch - num_inputs);
}

// A traced and lowered kernel for one signature of arguments, with the backend that runs it: the
// interpreter, or the compiled kernel.
struct Program {
  std::vector<std::pair<DType, Shape>> signature;  // of the arguments
  std::vector<std::string> names;                  // of every operand: "scalar prefetch 0", "input 1", ...
  ir::Function traced;
  ir::Function lowered;
  std::unique_ptr<rt::Interpreter> interpreter;
  std::shared_ptr<const jit::CompiledKernel> compiled;
  std::vector<ir::DimSemantics> semantics;
  std::vector<int64_t> grid;
  bool communicates = false;  // remote copies or signals: launches on a mesh are collective

  // How the grid's steps split over `cores` cores (and how many of them have any).
  struct Split {
    int cores = 0;
    int active = 0;
    std::vector<rt::StepRange> ranges;
  };
  Split split_for(int cores) const {
    std::lock_guard lock(arena_mutex);
    if (split.cores != cores) {
      split.cores = cores;
      split.ranges = rt::split_steps(grid, semantics, cores);
      split.active = 0;
      for (int c = 0; c < cores; ++c)
        if (split.ranges[c].lo < split.ranges[c].hi) split.active = c + 1;  // later cores have nothing to do
    }
    return split;
  }
  mutable Split split;

  // Memory compiled kernels allocated in earlier launches, for the next launches to reuse.
  std::vector<std::unique_ptr<rt::Buffer>> take_arena() const {
    std::lock_guard lock(arena_mutex);
    if (arenas.empty()) return {};
    auto a = std::move(arenas.back());
    arenas.pop_back();
    return a;
  }
  void give_arena(std::vector<std::unique_ptr<rt::Buffer>> a) const {
    std::lock_guard lock(arena_mutex);
    arenas.push_back(std::move(a));
  }
  mutable std::mutex arena_mutex;
  mutable std::vector<std::vector<std::unique_ptr<rt::Buffer>>> arenas;
};

// Where a launch runs on a mesh: the device (inside shard_map) and, for a kernel that communicates,
// the group of every device's instance of it.
struct MeshPlace {
  rt::DeviceContext* device = nullptr;
  std::shared_ptr<rt::LaunchGroup> group;
};

// Makes `ctx` a member of the launch's place: its device, and its seat in the group (if any).
rt::GroupMembership membership(const MeshPlace& place, rt::CoreContext& ctx) {
  ctx.device = place.device;
  const rt::Seat seat{place.device ? place.device->logical : 0, ctx.point.core};
  return rt::GroupMembership(place.group.get(), seat, ctx);
}

bool same_signature(const std::vector<std::pair<DType, Shape>>& sig, std::span<const Array> args) {
  if (sig.size() != args.size()) return false;
  for (size_t i = 0; i < args.size(); ++i)
    if (sig[i].first != args[i].dtype() || sig[i].second != args[i].shape()) return false;
  return true;
}

}  // namespace

class CallImpl {
 public:
  explicit CallImpl(CallSpec spec) : spec_(std::move(spec)) {
    if (spec_.options.name.empty()) spec_.options.name = "kernel";
    name_ = spec_.options.name;
    interpreted_ = runs_interpreted(spec_.options);
  }

  std::vector<Array> run(std::span<const Array> args, SourceLoc loc);
  std::shared_ptr<const Program> program(std::span<const Array> args, SourceLoc loc);
  const CallOptions& options() const { return spec_.options; }
  bool interpreted() const { return interpreted_; }

 private:
  int num_inputs(size_t num_args) const { return static_cast<int>(num_args) - spec_.num_scalar_prefetch; }
  void validate(std::span<const Array> args, SourceLoc loc) const;
  std::vector<ir::DimSemantics> semantics() const;
  ir::Function trace(std::span<const Array> args) const;
  const BlockSpec& spec_for(int operand, int inputs) const;
  [[noreturn]] void fail(std::string what, std::string given, std::string fix, SourceLoc loc) const {
    throw UserError(fmt::format("pallas_call `{}`: {}", name_, what), std::move(given), std::move(fix), loc);
  }

  std::vector<Array> run_compiled(const Program& prog, std::span<const Array> args);
  // The launch's place on the mesh of the current shard_map (none outside one); a kernel that
  // communicates joins its collective group.
  MeshPlace join_mesh(const Program& prog, int cores);
  std::vector<Array> run_interpreted(const Program& prog, std::span<const Array> args);
  // The output arrays of a launch: fresh, or copies of their aliased inputs. Fresh outputs are
  // poisoned for the interpreter (so what no block writes shows as NaN / max-int) and left as they
  // are for compiled kernels, as on a TPU.
  std::vector<Array> make_outputs(std::span<const Array> args, std::optional<bool> poison_zero) const;

  CallSpec spec_;
  std::string name_;
  bool interpreted_ = false;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Program>> programs_;
  std::shared_ptr<const Program> last_;  // the program of the previous call: usually this one's
  BlockSpec default_spec_{std::source_location()};
};

const BlockSpec& CallImpl::spec_for(int operand, int inputs) const {
  // operand: index among inputs then outputs (no prefetch).
  if (operand < inputs) return spec_.in_specs.empty() ? default_spec_ : spec_.in_specs[operand];
  return spec_.out_specs.empty() ? default_spec_ : spec_.out_specs[operand - inputs];
}

std::vector<ir::DimSemantics> CallImpl::semantics() const {
  const auto& given = spec_.options.compiler_params.dimension_semantics;
  if (!given.empty()) return given;
  return std::vector<ir::DimSemantics>(spec_.grid.size(), ir::DimSemantics::Arbitrary);
}

void CallImpl::validate(std::span<const Array> args, SourceLoc loc) const {
  const int np = spec_.num_scalar_prefetch;
  if (np < 0) fail("num_scalar_prefetch is negative", fmt::format("{}", np), "pass 0 or more", spec_.loc);
  if (static_cast<int>(args.size()) < np)
    fail("the call has fewer arguments than scalar-prefetch operands",
         fmt::format("{} argument(s), num_scalar_prefetch = {}", args.size(), np),
         "pass the scalar-prefetch arrays first, then the inputs", loc);
  const int ni = num_inputs(args.size());
  const int no = static_cast<int>(spec_.out_shapes.size());
  if (!spec_.in_specs.empty() && static_cast<int>(spec_.in_specs.size()) != ni)
    fail("the number of in_specs differs from the number of inputs",
         fmt::format("{} in_specs for {} input(s) ({} argument(s) minus {} scalar-prefetch)", spec_.in_specs.size(), ni,
                     args.size(), np),
         "give one BlockSpec per input (scalar-prefetch operands have none), or call with matching arguments", loc);
  if (!spec_.out_specs.empty() && static_cast<int>(spec_.out_specs.size()) != no)
    fail("the number of out_specs differs from the number of outputs",
         fmt::format("{} out_specs for {} output shape(s)", spec_.out_specs.size(), no),
         "give one BlockSpec per output shape", spec_.loc);
  const int expected_arity = np + ni + no + static_cast<int>(spec_.scratch_shapes.size());
  if (spec_.kernel.arity != expected_arity)
    fail("the kernel takes a different number of refs than the call provides",
         fmt::format("a kernel of {} pl::Ref parameter(s); the call provides {} = {} scalar-prefetch + {} input(s) + {} "
                     "output(s) + {} scratch",
                     spec_.kernel.arity, expected_arity, np, ni, no, spec_.scratch_shapes.size()),
         "make the kernel take one pl::Ref per scalar-prefetch operand, input, output and scratch buffer, in that order",
         loc);
  for (size_t d = 0; d < spec_.grid.size(); ++d)
    if (spec_.grid[d] < 0)
      fail("grid dims must be >= 0", fmt::format("grid ({}) has {} in dim {}", fmt::join(spec_.grid, ", "), spec_.grid[d], d),
           "use non-negative grid sizes", spec_.loc);
  const auto& sem = spec_.options.compiler_params.dimension_semantics;
  if (!sem.empty()) {
    if (sem.size() != spec_.grid.size())
      fail("dimension_semantics must have one entry per grid dim",
           fmt::format("{} entries for a grid of {} dims", sem.size(), spec_.grid.size()),
           "list pl::parallel or pl::arbitrary for every grid dim", spec_.loc);
    bool seen_arbitrary = false;
    for (size_t d = 0; d < sem.size(); ++d) {
      if (sem[d] == ir::DimSemantics::Arbitrary) seen_arbitrary = true;
      else if (seen_arbitrary)
        fail("parallel grid dims must come before arbitrary ones",
             fmt::format("dim {} is parallel after an arbitrary dim", d),
             "reorder the grid so that the parallel dims form a prefix", spec_.loc);
    }
  }
  if (spec_.options.compiler_params.vmem_limit_bytes && *spec_.options.compiler_params.vmem_limit_bytes <= 0)
    fail("vmem_limit_bytes must be positive", fmt::format("{}", *spec_.options.compiler_params.vmem_limit_bytes),
         "leave it unset for 64 MiB, or give a positive byte count", spec_.loc);
  if (spec_.options.interpret && spec_.options.interpret->num_cores_or_threads < 1)
    fail("InterpretParams::num_cores_or_threads must be >= 1",
         fmt::format("{}", spec_.options.interpret->num_cores_or_threads), "use 1 or more cores", spec_.loc);
  std::set<int> aliased_outputs;
  for (auto [in, out] : spec_.options.input_output_aliases) {
    if (in < 0 || in >= np + ni)
      fail("input_output_aliases names an input that does not exist",
           fmt::format("{{{}, {}}} with {} input(s) counting {} scalar-prefetch operand(s)", in, out, np + ni, np),
           fmt::format("use input indices in [0, {}) (scalar-prefetch operands count first)", np + ni), loc);
    if (out < 0 || out >= no)
      fail("input_output_aliases names an output that does not exist",
           fmt::format("{{{}, {}}} with {} output(s)", in, out, no), fmt::format("use output indices in [0, {})", no), loc);
    if (in < np)
      fail("a scalar-prefetch operand cannot be aliased to an output", fmt::format("{{{}, {}}}", in, out),
           "alias a regular input instead", loc);
    if (!aliased_outputs.insert(out).second)
      fail("two inputs alias the same output", fmt::format("output {}", out), "alias each output at most once", loc);
    const Array& a = args[in];
    const ShapeDtype& o = spec_.out_shapes[out];
    if (a.shape() != o.shape || a.dtype() != o.dtype)
      fail("an aliased input and output differ in shape or dtype",
           fmt::format("input {} is {} {}, output {} is {} {}", in, shape_tuple_str(a.shape()), dtype_name(a.dtype()), out,
                       shape_tuple_str(o.shape), dtype_name(o.dtype)),
           "alias arrays of the same shape and dtype", loc);
  }
  for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k)
    check_allocatable(spec_.scratch_shapes[k], fmt::format("scratch {}", k), fmt::format("pallas_call `{}`", name_));
}

ir::Function CallImpl::trace(std::span<const Array> args) const {
  const int np = spec_.num_scalar_prefetch;
  const int ni = num_inputs(args.size());
  const int no = static_cast<int>(spec_.out_shapes.size());
  ir::Function fn;
  {
    TraceContext ctx(fn, name_);
    ctx.collective_id = spec_.options.compiler_params.collective_id;
    ir::Builder& b = ctx.builder();
    PipelineContext pc{fmt::format("pallas_call `{}`", name_), spec_.loc, spec_.grid, {}, 1};
    // How each input and output reaches the body; unwindowed ones keep their memory space (ANY/HBM).
    std::set<int> aliased, aliased_inputs;
    for (auto [in, out] : spec_.options.input_output_aliases) {
      aliased.insert(out);
      aliased_inputs.insert(in - np);
    }
    ir::PipelineAttr pa;
    pa.grid = spec_.grid;
    pa.semantics = semantics();
    std::vector<const BlockSpec*> specs;
    for (int k = 0; k < ni + no; ++k) {
      const bool output = k >= ni;
      const Shape& shape = output ? spec_.out_shapes[k - ni].shape : args[np + k].shape();
      specs.push_back(&spec_for(k, ni));
      pa.operands.push_back(pipeline_operand(pc, *specs.back(), shape, operand_name(np, ni, np + k), output,
                                             output ? aliased.count(k - ni) > 0 : aliased_inputs.count(k) > 0));
    }

    std::vector<ir::ValueId> arrays;  // inputs then outputs
    for (int k = 0; k < np; ++k)
      pc.prefetch.push_back(Ref::wrap(ctx, b.add_param(Type::ref(args[k].dtype(), args[k].shape(), MemorySpace::SMEM),
                                                       operand_name(np, ni, k))));
    for (int k = 0; k < ni + no; ++k) {
      const bool output = k >= ni;
      const ShapeDtype sd = output ? spec_.out_shapes[k - ni] : ShapeDtype(args[np + k].shape(), args[np + k].dtype());
      const MemorySpace space = pa.operands[k].windowed ? MemorySpace::ANY : pa.operands[k].space;
      arrays.push_back(b.add_param(Type::ref(sd.dtype, sd.shape, space), operand_name(np, ni, np + k)));
    }
    const ir::ValueId lo = b.add_param(Type::scalar(DType::index), "first step");
    const ir::ValueId hi = b.add_param(Type::scalar(DType::index), "end step");

    std::vector<Ref> scratch;
    for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k) {
      const MemoryRef& m = spec_.scratch_shapes[k].memory();
      ir::ValueId v = ctx.emit_value(OpKind::Alloc, {}, Type::ref(m.dtype, m.shape, m.space), fmt::format("scratch {}", k),
                                     spec_.scratch_shapes[k].loc());
      b.set_name(v, fmt::format("scratch {}", k));
      scratch.push_back(Ref::wrap(ctx, v));
    }

    std::vector<bool> whole_array(static_cast<size_t>(ni));
    for (int k = 0; k < ni; ++k) whole_array[k] = !pa.operands[k].windowed;
    trace_pipeline(ctx, pc, std::move(pa), specs, lo, hi, arrays, [&](std::vector<Ref>& blocks) {
      // Inputs passed whole are the caller's arrays: read-only unless aliased to an output. (Input
      // blocks are copies the kernel may write.)
      const auto& body_args = ctx.builder().function().regions[ctx.builder().insertion_region()].args;
      for (int k = 0; k < ni; ++k)
        if (whole_array[k] && !aliased_inputs.count(k)) ctx.read_only.insert(body_args[k]);
      std::vector<Ref> refs = pc.prefetch;
      refs.insert(refs.end(), blocks.begin(), blocks.end());
      refs.insert(refs.end(), scratch.begin(), scratch.end());
      spec_.kernel.fn(refs);
    });
  }
  // Loads nobody uses (x() = v loads x eagerly) are dropped here, so the traced IR shows intent.
  return passes::remove_dead_code(fn);
}

std::shared_ptr<const Program> CallImpl::program(std::span<const Array> args, SourceLoc loc) {
  std::lock_guard lock(mutex_);
  if (last_ && same_signature(last_->signature, args)) return last_;
  std::string key;
  for (const Array& a : args) key += fmt::format("{}[{}];", dtype_name(a.dtype()), fmt::join(a.shape(), ","));
  // Kernels traced inside shard_map may depend on the mesh (axis sizes, device ids).
  if (const rt::DeviceContext* d = rt::current_device()) key += d->mesh->str();
  if (auto it = programs_.find(key); it != programs_.end()) return last_ = it->second;
  validate(args, loc);
  auto p = std::make_shared<Program>();
  for (const Array& a : args) p->signature.emplace_back(a.dtype(), a.shape());
  const int np = spec_.num_scalar_prefetch, ni = num_inputs(args.size()), no = static_cast<int>(spec_.out_shapes.size());
  for (int k = 0; k < np + ni + no; ++k) p->names.push_back(operand_name(np, ni, k));
  p->traced = trace(args);
  passes::LoweringOptions lo;
  lo.vmem_limit_bytes = spec_.options.compiler_params.vmem_limit_bytes.value_or(lo.vmem_limit_bytes);
  lo.call_site = spec_.loc;
  p->lowered = passes::lower(p->traced, lo);
  if (spec_.options.debug) {
    std::fprintf(stderr, "// ---- pallas_call `%s`: traced ----\n%s// ---- lowered ----\n%s", name_.c_str(),
                 ir::print(p->traced).c_str(), ir::print(p->lowered).c_str());
  }
  if (interpreted_) {
    rt::InterpretOptions io;
    if (spec_.options.interpret)
      io.zero_uninitialized = spec_.options.interpret->uninitialized_memory == UninitializedMemory::zero;
    p->interpreter = std::make_unique<rt::Interpreter>(p->lowered, io);
  } else {
    p->compiled = jit::compile(p->lowered, spec_.options.compiler_params.target, spec_.loc);
  }
  p->semantics = semantics();
  p->communicates = ir::communicates(p->lowered);
  p->grid = spec_.grid;
  programs_.emplace(key, p);
  return last_ = p;
}

std::vector<Array> CallImpl::make_outputs(std::span<const Array> args, std::optional<bool> poison_zero) const {
  std::vector<Array> outs;
  outs.reserve(spec_.out_shapes.size());
  for (size_t o = 0; o < spec_.out_shapes.size(); ++o) {
    int aliased = -1;
    for (auto [in, out] : spec_.options.input_output_aliases)
      if (out == static_cast<int>(o)) aliased = in;
    if (aliased >= 0) {
      Array a = args[aliased];
      a.mutable_data();  // a copy of its own: the caller's input never changes
      outs.push_back(std::move(a));
      continue;
    }
    const ShapeDtype& sd = spec_.out_shapes[o];
    Array a = Array::empty(sd.shape, sd.dtype);
    if (poison_zero) {
      rt::Buffer view("output", sd.dtype, sd.shape, MemorySpace::ANY, a.mutable_data(), true);
      rt::fill_poison(rt::RefView::whole(view), *poison_zero);
    }
    outs.push_back(std::move(a));
  }
  return outs;
}

std::vector<Array> CallImpl::run(std::span<const Array> args, SourceLoc loc) {
  std::shared_ptr<const Program> prog = program(args, loc);
  return prog->interpreter ? run_interpreted(*prog, args) : run_compiled(*prog, args);
}

std::vector<Array> CallImpl::run_compiled(const Program& prog, std::span<const Array> args) {
  const int np = spec_.num_scalar_prefetch;
  const int ni = num_inputs(args.size());
  std::vector<Array> outs = make_outputs(args, std::nullopt);
  std::vector<Array> prefetch(args.begin(), args.begin() + np);  // SMEM copies the kernel may write
  void* operands_small[16];
  std::vector<void*> operands_large;
  const size_t count = static_cast<size_t>(np + ni) + outs.size();
  void** operands = count <= 16 ? operands_small : (operands_large.resize(count), operands_large.data());
  for (int k = 0; k < np; ++k) operands[k] = prefetch[k].mutable_data();
  for (int k = 0; k < ni; ++k) operands[np + k] = const_cast<std::byte*>(args[np + k].data());
  for (size_t o = 0; o < outs.size(); ++o) operands[np + ni + o] = outs[o].mutable_data();
  // An input aliased to an output is that output's buffer.
  for (auto [in, out] : spec_.options.input_output_aliases) operands[in] = operands[np + ni + out];

  rt::DeviceContext* device = rt::current_device();
  rt::Launch launch(device ? static_cast<int>(device->logical) : 0, name_);
  const jit::KernelEntry entry = prog.compiled->entry();
  // One core per thread; on a mesh, the threads are shared by its devices.
  const Program::Split split = prog.split_for(device ? std::max<int>(1, num_threads() / static_cast<int>(device->mesh->size()))
                                                     : num_threads());
  const MeshPlace place = join_mesh(prog, split.active);
  const bool worker = rt::use_dma_worker(split.active) && !place.group;
  const auto& params = prog.lowered.params();
  auto run_core = [&](int core) {
    const rt::StepRange range = split.ranges[core];
    if (range.lo >= range.hi) return;
    rt::CoreContext ctx(launch, core, &prog.lowered);
    ctx.allocations = prog.take_arena();
    if (worker) ctx.dma.configure(rt::DmaMode::worker, 0);
    for (size_t k = 0; k < count; ++k) {
      const Type& t = prog.lowered.type(params[k]);
      ctx.add_region(-1 - static_cast<int64_t>(k), operands[k], t.num_elements() * dtype_size(t.dtype));
    }
    {
      const rt::GroupMembership member = membership(place, ctx);  // other devices stop reaching this core before its memory goes
      entry(operands, range.lo, range.hi, &ctx);
    }
    ctx.dma.stop();  // after a failure, copies may still be running into the arena
    prog.give_arena(std::move(ctx.allocations));
    if (ctx.fault) throw *ctx.fault;
  };
  if (split.active <= 1) run_core(0);  // no threads to wake
  else rt::run_cores(launch, split.active, run_core);
  return outs;
}

std::vector<Array> CallImpl::run_interpreted(const Program& prog, std::span<const Array> args) {
  const int np = spec_.num_scalar_prefetch;
  const int ni = num_inputs(args.size());
  const bool zero = spec_.options.interpret &&
                    spec_.options.interpret->uninitialized_memory == UninitializedMemory::zero;
  std::vector<Array> outs = make_outputs(args, zero);
  std::vector<std::unique_ptr<rt::Buffer>> buffers;
  std::vector<rt::Buffer*> by_operand;
  for (int k = 0; k < np; ++k)
    by_operand.push_back(buffers.emplace_back(std::make_unique<rt::Buffer>(prog.names[k], args[k], MemorySpace::SMEM, true)).get());
  for (int k = 0; k < ni; ++k)
    by_operand.push_back(
        buffers.emplace_back(std::make_unique<rt::Buffer>(prog.names[np + k], args[np + k], MemorySpace::ANY, false)).get());
  for (size_t o = 0; o < outs.size(); ++o)
    by_operand.push_back(
        buffers.emplace_back(std::make_unique<rt::Buffer>(prog.names[np + ni + o], outs[o], MemorySpace::ANY, true)).get());
  for (auto [in, out] : spec_.options.input_output_aliases) by_operand[in] = by_operand[np + ni + out];

  rt::DeviceContext* device = rt::current_device();
  rt::Launch launch(device ? static_cast<int>(device->logical) : 0, name_);
  const Program::Split split =
      prog.split_for(spec_.options.interpret ? spec_.options.interpret->num_cores_or_threads : 1);  // simulated cores
  const MeshPlace place = join_mesh(prog, split.active);
  rt::run_cores(launch, split.active, [&](int core) {
    const rt::StepRange range = split.ranges[core];
    if (range.lo >= range.hi) return;
    std::vector<rt::Value> params;
    for (rt::Buffer* b : by_operand) params.emplace_back(rt::RefView::whole(*b));
    params.emplace_back(Array::scalar(static_cast<double>(range.lo), DType::index));
    params.emplace_back(Array::scalar(static_cast<double>(range.hi), DType::index));
    rt::CoreContext ctx(launch, core);
    if (const auto& ip = spec_.options.interpret)
      ctx.dma.configure(ip->dma_execution_mode == DmaExecutionMode::on_wait ? rt::DmaMode::on_wait : rt::DmaMode::eager,
                        ip->random_seed + static_cast<uint64_t>(core));
    for (size_t k = 0; k < by_operand.size(); ++k)
      ctx.add_region(-1 - static_cast<int64_t>(k), by_operand[k]->data(),
                     num_elements(by_operand[k]->shape) * dtype_size(by_operand[k]->dtype));
    const rt::GroupMembership member = membership(place, ctx);
    prog.interpreter->run(ctx, std::move(params));
  });
  // The buffers wrote into storage of their own (copy-on-write); hand their arrays out.
  std::vector<Array> result;
  for (size_t o = 0; o < outs.size(); ++o) result.push_back(by_operand[np + ni + o]->array());
  return result;
}

MeshPlace CallImpl::join_mesh(const Program& prog, int cores) {
  MeshPlace place{rt::current_device(), nullptr};
  if (!prog.communicates) return place;
  if (!place.device)
    throw UserError(fmt::format("pallas_call `{}` talks to other devices but runs outside a mesh", name_),
                    "a kernel with remote copies or signals called outside pl::shard_map",
                    "call it inside pl::shard_map(f, mesh, in_specs, out_specs)", spec_.loc);
  rt::random_delay();
  place.group = place.device->run->join(place.device->collective_launches++,
                                        rt::LaunchKey{name_, spec_.options.compiler_params.collective_id, spec_.loc},
                                        place.device->logical, cores);
  return place;
}

bool runs_interpreted(const CallOptions& options) {
  return options.interpret.has_value() || config::interpret();
}

const CallOptions& call_options(const CallImpl& call) { return call.options(); }
bool call_interpreted(const CallImpl& call) { return call.interpreted(); }

std::shared_ptr<CallImpl> make_call(CallSpec spec) { return std::make_shared<CallImpl>(std::move(spec)); }

std::vector<Array> run_call(CallImpl& call, std::span<const Array> args, SourceLoc loc) { return call.run(args, loc); }

const ir::Function& call_ir(CallImpl& call, std::span<const Array> args, bool lowered, SourceLoc loc) {
  auto p = call.program(args, loc);  // programs live as long as the call
  return lowered ? p->lowered : p->traced;
}

}  // namespace detail
}  // namespace tessera
