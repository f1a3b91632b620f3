#include "dsl/pallas_call.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "dsl/pipeline_trace.h"
#include "dsl/program.h"
#include "dsl/run_scoped.h"
#include "dsl/trace.h"
#include "jit/lowering/canonicalize.h"
#include "runtime/config.h"
#include "runtime/launch.h"
#include "runtime/mesh.h"

namespace tessera {

namespace {

// Names `name` as the next dim of a grid whose dims so far are called `names`: non-empty and unique.
// `written` is the dim as the user wrote it, for the message.
void check_grid_name(const std::vector<std::string>& names, const std::string& name, const std::string& written,
                     SourceLoc loc) {
  if (name.empty())
    throw UserError("a named grid dim needs a non-empty name", written,
                    "name every dim, e.g. pl::axis(\"i\", 4), or give the grid plain sizes", loc);
  if (std::find(names.begin(), names.end(), name) != names.end())
    throw UserError(fmt::format("grid axis `{}` is named twice", name),
                    fmt::format("a grid with dims {} and another `{}`", fmt::join(names, ", "), name),
                    "give every grid dim its own name", loc);
}

}  // namespace

Grid::Grid(std::initializer_list<GridAxis> axes, std::source_location loc) {
  for (const GridAxis& a : axes) {
    check_grid_name(names_, a.name, fmt::format("pl::axis(\"\", {})", a.size), loc);
    names_.push_back(a.name);
    dims_.push_back(a.size);
  }
}

Grid::Grid(std::initializer_list<GridDim> dims, std::source_location loc) {
  const bool named = dims.size() > 0 && dims.begin()->name().has_value();
  for (const GridDim& d : dims) {
    // Names are all or nothing, as in Pallas: pl::axis_index(name) and pl::program_id(k) both work then.
    if (d.name().has_value() != named)
      throw UserError("a grid names some of its dims and not others",
                      fmt::format("grid dim {} {}", dims_.size(), named ? "without a name" : "named `" + *d.name() + "`"),
                      "name every dim (pl::GridDim(\"i\", size), pl::axis(\"i\", 4)) or none", loc);
    if (named) {
      check_grid_name(names_, *d.name(),
                      d.prefetch() ? fmt::format("pl::GridDim(\"\", pl::from_prefetch({}))", *d.prefetch())
                                   : fmt::format("pl::GridDim(\"\", {})", d.size()),
                      loc);
      names_.push_back(*d.name());
    }
    if (d.prefetch()) {
      prefetch_dims_.push_back(PrefetchDim{dims_.size(), *d.prefetch(), d.loc()});
      dims_.push_back(ir::kDynamicDim);
    } else if (d.is_static()) {
      dims_.push_back(d.size());
    } else {
      // A pallas_call grid is written before its kernel is traced: a traced value here belongs to
      // another kernel.
      throw UserError("a pallas_call grid dim cannot be a traced value",
                      fmt::format("{} in grid dim {}", detail::describe(d.value()), dims_.size()),
                      "size the dim at call time with pl::from_prefetch(k), scalar-prefetch argument k (a rank-0 "
                      "integer array); traced grid dims belong to pl::emit_pipeline",
                      d.loc().known() ? d.loc() : SourceLoc(loc));
    }
  }
}

ShapeDtype::ShapeDtype(const MemoryRef& m, std::source_location at) : shape(m.shape), dtype(m.dtype), loc(at) {
  if (m.space != MemorySpace::SEMAPHORE)
    throw UserError("an output shape given as a memory ref must be a semaphore type",
                    fmt::format("a {} {} ref in memory space {}", shape_tuple_str(m.shape), dtype_name(m.dtype),
                                memory_space_name(m.space)),
                    "give data outputs as pl::ShapeDtype(shape, dtype) (and their memory space in out_specs), "
                    "semaphores as pl::SemaphoreType::DMA / ::REGULAR, optionally with a shape",
                    at);
}

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

// A semaphore array (an earlier call's semaphore output, or one to return) reaches the kernel whole,
// as semaphores: an unwindowed operand in memory space SEMAPHORE.
ir::PipelineOperand semaphore_operand(const std::string& name, bool output, bool aliased, SourceLoc loc) {
  ir::PipelineOperand po;
  po.name = name;
  po.is_output = output;
  po.aliased = aliased;
  po.windowed = false;
  po.space = MemorySpace::SEMAPHORE;
  po.loc = loc;
  return po;
}

bool same_signature(const std::vector<std::pair<DType, Shape>>& sig, std::span<const Array> args) {
  if (sig.size() != args.size()) return false;
  for (size_t i = 0; i < args.size(); ++i)
    if (sig[i].first != args[i].dtype() || sig[i].second != args[i].shape()) return false;
  return true;
}

}  // namespace

class CallImpl : public CallBase {
 public:
  explicit CallImpl(CallSpec spec) : CallBase("pallas_call", spec.options, spec.loc), spec_(std::move(spec)) {}

  std::vector<Array> run(std::span<const Array> args, SourceLoc loc);
  // The program for these arguments: traced, lowered and built on the first call with their
  // signature (on a mesh, for its mesh), then remembered.
  std::shared_ptr<const Program> program(std::span<const Array> args, SourceLoc loc);
  const CallOptions& options() const { return spec_.options; }

 private:
  int num_inputs(size_t num_args) const { return static_cast<int>(num_args) - spec_.num_scalar_prefetch; }
  void validate(std::span<const Array> args, SourceLoc loc) const;
  void check_grid_from_prefetch(std::span<const Array> args) const;
  // Semaphore arrays are passed with BlockSpec(pl::SEMAPHORE), and only they are (docs/design.md §4.9).
  void check_semaphore_operands(std::span<const Array> args, SourceLoc loc) const;
  std::vector<ir::DimSemantics> semantics() const;
  ir::Function trace(std::span<const Array> args) const;
  const BlockSpec& spec_for(int operand, int inputs) const;

  CallSpec spec_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Program>> programs_;
  std::shared_ptr<const Program> last_;  // the program of the previous call: usually this one's
  std::vector<std::pair<DType, Shape>> last_signature_;  // of its arguments
  std::string last_mesh_;  // the mesh it was traced on inside shard_map (its str()), else empty
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
  PipelineContext{title(), spec_.loc, spec_.grid, {}, 1}.check_grid();
  check_grid_from_prefetch(args);
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
  check_out_shapes(spec_.out_shapes);
  check_num_schedules(spec_.options, spec_.loc);
  check_semaphore_operands(args, loc);
  check_aliases(spec_.options.input_output_aliases, args, np, spec_.out_shapes, loc);
  for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k)
    check_allocatable(spec_.scratch_shapes[k], fmt::format("scratch {}", k), title());
}

// A grid dim sized at call time reads a scalar-prefetch argument that holds one integer.
void CallImpl::check_grid_from_prefetch(std::span<const Array> args) const {
  const int np = spec_.num_scalar_prefetch;
  for (const Grid::PrefetchDim& d : spec_.grid_from_prefetch) {
    if (d.operand < 0 || d.operand >= np)
      fail(fmt::format("grid dim {} is sized by scalar-prefetch argument {}, which the call does not have", d.dim, d.operand),
           fmt::format("pl::from_prefetch({}) with num_scalar_prefetch = {}", d.operand, np),
           "name one of the scalar-prefetch arguments (0 to num_scalar_prefetch - 1) in a pl::PrefetchScalarGridSpec",
           d.loc);
    const Array& a = args[static_cast<size_t>(d.operand)];
    if (!a.shape().empty() || !is_int(a.dtype()))
      fail(fmt::format("grid dim {} is sized by scalar-prefetch argument {}, which is not an integer scalar", d.dim, d.operand),
           fmt::format("an array of dtype {} and shape {}", dtype_name(a.dtype()), shape_tuple_str(a.shape())),
           "pass the size as a rank-0 integer array, e.g. pl::Array::scalar(n, pl::i32)", d.loc);
  }
}

void CallImpl::check_semaphore_operands(std::span<const Array> args, SourceLoc loc) const {
  const int np = spec_.num_scalar_prefetch, ni = num_inputs(args.size());
  for (int k = 0; k < np; ++k)
    if (is_semaphore(args[k].dtype()))
      fail(fmt::format("{} is an array of semaphores, which cannot be a scalar-prefetch operand", operand_name(np, ni, k)),
           fmt::format("a {} {} array", shape_tuple_str(args[k].shape()), dtype_name(args[k].dtype())),
           "pass it after the scalar-prefetch operands, with pl::BlockSpec(pl::SEMAPHORE)", loc);
  for (int k = 0; k < ni + static_cast<int>(spec_.out_shapes.size()); ++k) {
    const bool output = k >= ni;
    const DType dtype = output ? spec_.out_shapes[k - ni].dtype : args[np + k].dtype();
    const Shape& shape = output ? spec_.out_shapes[k - ni].shape : args[np + k].shape();
    const BlockSpec& spec = spec_for(k, ni);
    const SourceLoc at = spec.loc().known() ? spec.loc() : output ? spec_.out_shapes[k - ni].loc : loc;
    const std::string name = operand_name(np, ni, np + k);
    const std::string given = fmt::format("a {} {} array", shape_tuple_str(shape), dtype_name(dtype));
    const bool in_semaphore_space = spec.memory_space() == MemorySpace::SEMAPHORE;
    if (is_semaphore(dtype)) {
      // A spec that says nothing (no memory space, no blocks) is the default: semaphores, whole.
      const bool plain = !spec.memory_space() && !spec.block_shape() && !spec.index_map();
      if (!(in_semaphore_space || plain) || spec.block_shape() || spec.index_map())
        fail(fmt::format("{} is an array of semaphores, which a kernel reaches only as semaphores", name),
             fmt::format("{} with a BlockSpec {}", given,
                         spec.block_shape() || spec.index_map()
                             ? "of blocks"
                             : fmt::format("in memory space {}", memory_space_name(*spec.memory_space()))),
             "pass it whole with pl::BlockSpec(pl::SEMAPHORE); read its counts on the host with to_vector<int64_t>()", at);
    } else if (in_semaphore_space) {
      fail(fmt::format("{} has a BlockSpec in memory space SEMAPHORE, but it holds data", name), given,
           "use pl::BlockSpec(pl::SEMAPHORE) for semaphore arrays only (a pallas_call output of a pl::SemaphoreType); "
           "pass data with VMEM blocks or pl::BlockSpec(pl::ANY)",
           at);
    }
  }
}

ir::Function CallImpl::trace(std::span<const Array> args) const {
  const int np = spec_.num_scalar_prefetch;
  const int ni = num_inputs(args.size());
  const int no = static_cast<int>(spec_.out_shapes.size());
  ir::Function fn;
  {
    TraceContext ctx(fn, name_);
    ctx.collective_id = spec_.options.compiler_params.collective_id;
    ctx.grid_names = spec_.grid_names;
    ir::Builder& b = ctx.builder();
    PipelineContext pc{title(), spec_.loc, spec_.grid, {}, 1};
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
      const DType dtype = output ? spec_.out_shapes[k - ni].dtype : args[np + k].dtype();
      const bool is_aliased = output ? aliased.count(k - ni) > 0 : aliased_inputs.count(k) > 0;
      specs.push_back(&spec_for(k, ni));
      pa.operands.push_back(is_semaphore(dtype) ? semaphore_operand(operand_name(np, ni, np + k), output, is_aliased,
                                                                    specs.back()->loc().known() ? specs.back()->loc() : spec_.loc)
                                                : pipeline_operand(pc, *specs.back(), shape, operand_name(np, ni, np + k),
                                                                   output, is_aliased));
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
    // Dims sized at call time: the kernel reads the size from its own copy of the argument, which
    // holds what the launch read on the host to split the steps (no kernel code ran before this).
    for (const Grid::PrefetchDim& d : spec_.grid_from_prefetch)
      pc.sizes.push_back(cast_to(pc.prefetch[static_cast<size_t>(d.operand)].slot({}, d.loc), DType::index, d.loc).id());
    const ir::ValueId lo = b.add_param(Type::scalar(DType::index), "first step");
    const ir::ValueId hi = b.add_param(Type::scalar(DType::index), "end step");

    std::vector<Ref> scratch;
    for (size_t k = 0; k < spec_.scratch_shapes.size(); ++k) scratch.push_back(trace_scratch(ctx, spec_.scratch_shapes[k], k));

    std::vector<bool> whole_array(static_cast<size_t>(ni));
    // A semaphore input is the kernel's own copy of the caller's counts: waits take from it.
    for (int k = 0; k < ni; ++k) whole_array[k] = !pa.operands[k].windowed && pa.operands[k].space != MemorySpace::SEMAPHORE;
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
  check_not_tracing(loc);  // before the lock, which the trace of this very call may hold
  std::lock_guard lock(mutex_);
  // Kernels traced inside shard_map may depend on the mesh (axis sizes, device ids): the same
  // shapes on another mesh are another program.
  const rt::DeviceContext* device = rt::current_device();
  std::string mesh = device ? device->mesh->str() : std::string();
  if (last_ && same_signature(last_signature_, args) && mesh == last_mesh_) return last_;
  std::string key;
  for (const Array& a : args) key += fmt::format("{}[{}];", dtype_name(a.dtype()), fmt::join(a.shape(), ","));
  key += mesh;
  auto remember = [&](std::shared_ptr<const Program> p) {
    last_signature_.clear();
    for (const Array& a : args) last_signature_.emplace_back(a.dtype(), a.shape());
    last_mesh_ = std::move(mesh);
    return last_ = std::move(p);
  };
  if (auto it = programs_.find(key); it != programs_.end()) return remember(it->second);
  validate(args, loc);
  auto p = std::make_shared<Program>();
  p->traced = trace(args);
  const int np = spec_.num_scalar_prefetch, ni = num_inputs(args.size()), no = static_cast<int>(spec_.out_shapes.size());
  auto executable = [&](bool interpreted) {
    auto exe = std::make_shared<rt::Executable>();
    exe->key = rt::LaunchKey{name_, spec_.options.compiler_params.collective_id, spec_.loc};
    for (int k = 0; k < np + ni + no; ++k) {
      const bool output = k >= np + ni;
      const ShapeDtype sd = output ? spec_.out_shapes[k - np - ni] : ShapeDtype(args[k].shape(), args[k].dtype());
      const rt::OperandRole role = k < np ? rt::OperandRole::scalar_prefetch
                                   : output ? rt::OperandRole::output
                                            : rt::OperandRole::input;
      const MemorySpace space = k < np                  ? MemorySpace::SMEM
                                : is_semaphore(sd.dtype) ? MemorySpace::SEMAPHORE
                                                         : MemorySpace::ANY;
      exe->operands.push_back(rt::OperandInfo{operand_name(np, ni, k), role, sd.dtype, sd.shape, space, spec_.loc});
    }
    exe->aliases.assign(spec_.options.input_output_aliases.begin(), spec_.options.input_output_aliases.end());
    exe->grid = spec_.grid;
    for (const Grid::PrefetchDim& d : spec_.grid_from_prefetch)
      exe->grid_from_args.push_back(rt::GridFromArg{d.dim, static_cast<size_t>(d.operand), d.loc});
    exe->semantics = semantics();
    build_executable(*exe, p->traced, spec_.options, interpreted, title());
    return exe;
  };
  p->exe = executable(interpreted());
  if (checks_against_interpreter()) p->reference = executable(true);
  programs_.emplace(key, p);
  return remember(p);
}

std::vector<Array> CallImpl::run(std::span<const Array> args, SourceLoc loc) {
  std::shared_ptr<const Program> prog = program(args, loc);
  if (prog->exe->communicates && !rt::current_device())
    throw UserError(fmt::format("{} talks to other devices but runs outside a mesh", title()),
                    "a kernel with remote copies or signals called outside pl::shard_map",
                    "call it inside pl::shard_map(f, mesh, in_specs, out_specs)", spec_.loc);
  if (const auto& ip = spec_.options.interpret; ip && ip->num_schedules > 1)
    return explore_schedules(*prog->exe, args, ip->random_seed, ip->num_schedules, num_inputs(args.size()), title(), loc);
  std::vector<Array> outs = rt::launch(*prog->exe, args);
  if (prog->reference) {
    rt::BlockWriteLog writes;
    const std::vector<Array> expected = rt::launch(*prog->reference, args, {.block_writes = &writes});
    compare_with_interpreter(outs, expected, &writes, num_inputs(args.size()), spec_.options.check_tolerance, title(), loc,
                             spec_.options.check_unwritten);
  }
  return outs;
}

const CallOptions& call_options(const CallImpl& call) { return call.options(); }
bool call_interpreted(const CallImpl& call) { return call.interpreted(); }

std::shared_ptr<CallImpl> make_call(CallSpec spec) { return std::make_shared<CallImpl>(std::move(spec)); }

// The settings the call's compile and launch read are its own: an invalid one is reported at `loc`.
std::vector<Array> run_call(CallImpl& call, std::span<const Array> args, SourceLoc loc) {
  const config::CallSite site(loc);
  return call.run(args, loc);
}

const ir::Function& call_ir(CallImpl& call, std::span<const Array> args, bool lowered, SourceLoc loc) {
  const config::CallSite site(loc);
  auto p = call.program(args, loc);  // programs live as long as the call
  return lowered ? p->exe->lowered : p->traced;
}

}  // namespace detail
}  // namespace tessera
