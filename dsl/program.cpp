#include "dsl/program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <set>

#include "jit/ir/printer.h"
#include "jit/llvm/compiler.h"
#include "jit/lowering/lowering.h"
#include "runtime/config.h"
#include "runtime/differential.h"
#include "runtime/interpreter/interpreter.h"

namespace tessera::detail {

// Whether a call made with these options runs in the interpreter: when it asks for it, or when
// TESSERA_INTERPRET is set as the call is made.
namespace {
bool runs_interpreted(const CallOptions& options) { return options.interpret.has_value() || config::interpret(); }
}  // namespace

CallBase::CallBase(std::string_view api, CallOptions& options, SourceLoc loc) {
  const config::CallSite site(loc);
  if (options.name.empty()) options.name = "kernel";
  name_ = options.name;
  title_ = fmt::format("{} `{}`", api, name_);
  interpreted_ = runs_interpreted(options);
  // TESSERA_DETECT_RACES: as if the call had asked for detection. Read here, where TESSERA_INTERPRET
  // is, so both apply to the calls made while they are set.
  if (interpreted_ && config::detect_races()) {
    if (!options.interpret) options.interpret.emplace();
    options.interpret->detect_races = true;
  }
  checks_ = !interpreted_ && (options.check_against_interpreter || config::check_against_interpreter());
}

void CallBase::fail(std::string what, std::string given, std::string fix, SourceLoc loc) const {
  throw UserError(fmt::format("{}: {}", title_, what), std::move(given), std::move(fix), loc);
}

void CallBase::check_not_tracing(SourceLoc loc) const {
  if (TraceContext* ctx = TraceContext::active())
    fail(fmt::format("called while kernel `{}` is being traced", ctx->builder().function().name),
         "a call made inside a kernel body or index map",
         "make calls from host code: a kernel cannot launch kernels. To share kernel code, call a C++ function over "
         "pl::Refs from the kernel, or pl::emit_pipeline for a nested grid",
         loc);
}

void CallBase::check_out_shapes(const std::vector<ShapeDtype>& out_shapes) const {
  for (size_t k = 0; k < out_shapes.size(); ++k)
    if (std::string why = shape_error(out_shapes[k].shape, dtype_size(out_shapes[k].dtype)); !why.empty())
      fail(fmt::format("output {} has a shape no array can have", k),
           fmt::format("pl::ShapeDtype({}, {}): {}", shape_tuple_str(out_shapes[k].shape), dtype_name(out_shapes[k].dtype), why),
           "give every dim as a size >= 0, small enough that the output's bytes fit in memory", out_shapes[k].loc);
}

void CallBase::check_num_schedules(const CallOptions& options, SourceLoc loc) const {
  const std::optional<InterpretParams>& ip = options.interpret;
  if (!ip) return;
  if (ip->num_schedules < 1)
    fail("InterpretParams::num_schedules must be >= 1", fmt::format("{}", ip->num_schedules),
         "use 1 to run one schedule, or more to explore several", loc);
  if (ip->num_schedules > 1 && ip->dma_execution_mode != DmaExecutionMode::on_wait)
    fail("InterpretParams::num_schedules explores the order in which copies complete, which eager copies do not have",
         fmt::format("num_schedules = {} with dma_execution_mode = eager", ip->num_schedules),
         "set .dma_execution_mode = pl::DmaExecutionMode::on_wait", loc);
}

void CallBase::check_aliases(const std::map<int, int>& aliases, std::span<const Array> args,
                             std::optional<int> num_prefetch, const std::vector<ShapeDtype>& out_shapes,
                             SourceLoc loc) const {
  detail::check_aliases(aliases, args, num_prefetch, out_shapes, loc,
                        [this](std::string what, std::string given, std::string fix, SourceLoc at) {
                          fail(std::move(what), std::move(given), std::move(fix), at);
                        });
}

void check_aliases(const std::map<int, int>& aliases, std::span<const Array> args, std::optional<int> num_prefetch,
                   const std::vector<ShapeDtype>& out_shapes, SourceLoc loc, const FailFn& fail) {
  const int np = num_prefetch.value_or(0);
  const int na = static_cast<int>(args.size()), no = static_cast<int>(out_shapes.size());
  std::set<int> aliased_outputs;
  for (auto [in, out] : aliases) {
    if (in < 0 || in >= na)
      fail("input_output_aliases names an input that does not exist",
           num_prefetch ? fmt::format("{{{}, {}}} with {} input(s) counting {} scalar-prefetch operand(s)", in, out, na, np)
                        : fmt::format("{{{}, {}}} with {} input(s)", in, out, na),
           num_prefetch ? fmt::format("use input indices in [0, {}) (scalar-prefetch operands count first)", na)
                        : fmt::format("use input indices in [0, {})", na),
           loc);
    if (out < 0 || out >= no)
      fail("input_output_aliases names an output that does not exist",
           fmt::format("{{{}, {}}} with {} output(s)", in, out, no), fmt::format("use output indices in [0, {})", no), loc);
    if (in < np)
      fail("a scalar-prefetch operand cannot be aliased to an output", fmt::format("{{{}, {}}}", in, out),
           "alias a regular input instead", loc);
    if (!aliased_outputs.insert(out).second)
      fail("two inputs alias the same output", fmt::format("output {}", out), "alias each output at most once", loc);
    const Array& a = args[in];
    const ShapeDtype& o = out_shapes[out];
    if (a.shape() != o.shape || a.dtype() != o.dtype)
      fail("an aliased input and output differ in shape or dtype",
           fmt::format("input {} is {} {}, output {} is {} {}", in, shape_tuple_str(a.shape()), dtype_name(a.dtype()), out,
                       shape_tuple_str(o.shape), dtype_name(o.dtype)),
           "alias arrays of the same shape and dtype", loc);
  }
}

Ref trace_scratch(TraceContext& ctx, const ScratchShape& scratch, size_t k) {
  const MemoryRef& m = scratch.memory();
  const std::string name = fmt::format("scratch {}", k);
  const ir::ValueId v = ctx.emit_value(ir::OpKind::Alloc, {}, Type::ref(m.dtype, m.shape, m.space), name, scratch.loc());
  ctx.builder().set_name(v, name);
  return Ref::wrap(ctx, v);
}

namespace {

// pl::run_scoped's ANY/HBM buffers: only the interpreter allocates them, and only when asked to
// (InterpretParams::allow_hbm_allocation_in_run_scoped), as in Pallas, since a TPU cannot.
void check_hbm_allocations(const ir::Function& traced, const CallOptions& options, bool interpreted,
                           const std::string& title) {
  const bool allowed = interpreted && options.interpret && options.interpret->allow_hbm_allocation_in_run_scoped;
  if (allowed) return;
  for (const ir::Op& op : traced.ops) {
    if (op.kind != ir::OpKind::Alloc) continue;
    const Type& t = traced.type(op.results[0]);
    if (!is_dma_only(t.space)) continue;
    throw UserError(
        fmt::format("{}: pl::run_scoped allocates `{}` in {}, which only the interpreter can, when asked to", title,
                    std::get<std::string>(op.attr), t.space == MemorySpace::ANY ? "ANY" : "HBM"),
        fmt::format("{} of shape {} {} ({})", std::get<std::string>(op.attr), shape_tuple_str(t.shape),
                    dtype_name(t.dtype), interpreted ? "interpreted without allow_hbm_allocation_in_run_scoped" : "compiled"),
        "allocate VMEM or SMEM buffers in run_scoped (HBM arrays come in as operands or outputs), or, to try the kernel "
        "in the interpreter only, pass .interpret = pl::InterpretParams{.allow_hbm_allocation_in_run_scoped = true}",
        op.loc);
  }
}

}  // namespace

void build_executable(rt::Executable& exe, const ir::Function& traced, const CallOptions& options, bool interpreted,
                      const std::string& title) {
  check_hbm_allocations(traced, options, interpreted, title);
  passes::LoweringOptions lo;
  lo.vmem_limit_bytes = options.compiler_params.vmem_limit_bytes.value_or(lo.vmem_limit_bytes);
  lo.call_site = exe.key.loc;
  lo.outputs_in_place = !interpreted;  // the interpreter keeps its output block copies and their checks
  exe.lowered = passes::lower(traced, lo);
  if (options.debug)
    std::fprintf(stderr, "// ---- %s: traced ----\n%s// ---- lowered ----\n%s", title.c_str(), ir::print(traced).c_str(),
                 ir::print(exe.lowered).c_str());
  exe.communicates = ir::communicates(exe.lowered);
  if (interpreted) {
    rt::InterpretOptions io;
    if (const auto& ip = options.interpret) {
      io.zero_uninitialized = ip->uninitialized_memory == UninitializedMemory::zero;
      io.skip_floating_point_ops = ip->skip_floating_point_ops;
      io.grid_point_recorder = ip->grid_point_recorder;
      io.uninitialized_out_of_bounds_reads = ip->out_of_bounds_reads == OutOfBoundsReads::uninitialized;
      io.random_parallel_order = ip->random_parallel_order;
      io.padded_buffer_bounds = ip->buffer_bounds == BufferBounds::padded;
      io.seed = ip->random_seed;
      exe.checked = rt::CheckedCores{ip->num_cores_or_threads,
                                     ip->dma_execution_mode == DmaExecutionMode::on_wait ? rt::DmaMode::on_wait
                                                                                         : rt::DmaMode::eager,
                                     ip->random_seed, io.zero_uninitialized, ip->detect_races};
    }
    exe.backend = std::make_unique<rt::Interpreter>(exe.lowered, io);
  } else {
    std::shared_ptr<const jit::CompiledKernel> kernel = jit::compile(exe.lowered, options.compiler_params.target, exe.key.loc);
    const rt::KernelEntry entry = kernel->entry();
    exe.backend = std::make_unique<rt::CompiledCode>(entry, std::move(kernel));
  }
}

void compare_with_interpreter(std::span<const Array> compiled, std::span<const Array> interpreted,
                              const rt::BlockWriteLog* writes, int num_inputs, std::optional<rt::Tolerance> tolerance,
                              const std::string& title, SourceLoc loc, bool check_unwritten) {
  for (size_t o = 0; o < compiled.size(); ++o) {
    const std::optional<rt::Mismatch> m = rt::first_mismatch(compiled[o], interpreted[o], tolerance, !check_unwritten);
    if (!m) continue;
    const std::string output = fmt::format("output {}", o);
    const rt::BlockWrite* w = writes ? writes->last_holding(num_inputs + static_cast<int64_t>(o), m->index) : nullptr;
    std::string block =
        w ? fmt::format("written back by {} (block at element offset ({}), shape ({}))", w->point.str(),
                        fmt::join(w->starts, ", "), fmt::join(w->shape, ", "))
          : writes ? "no block write-back of the grid holds it (an output in ANY/HBM space is written by copies)"
                   : "the kernel has no grid";
    if (m->interpreted_is_poison)
      block += "; the interpreted value is the poison of memory nobody wrote: no step of the kernel wrote this "
               "element, so the compiled value is whatever the memory held";
    throw MismatchError(
        fmt::format("{}: {} differs between compiled code and the interpreter at index ({})\n"
                    "  compiled:    {}\n  interpreted: {}\n"
                    "  tolerance:   |difference| <= {:g} + {:g} * |interpreted|; {} of {} elements differ\n"
                    "  block:       {}\n  at:          {}",
                    title, output, fmt::join(m->index, ", "), m->compiled, m->interpreted, m->tolerance.atol,
                    m->tolerance.rtol, m->count, compiled[o].size(), block, loc.str()),
        output, m->index, m->compiled, m->interpreted, w ? std::optional(w->point) : std::nullopt, loc);
  }
}

std::vector<Array> explore_schedules(const rt::Executable& exe, std::span<const Array> args, uint64_t first_seed,
                                     int64_t count, int num_inputs, const std::string& title, SourceLoc loc) {
  return explore_schedules(
      [&](const rt::LaunchOptions& options) { return rt::launch(exe, args, options); },
      first_seed, count, num_inputs, title, loc);
}

std::vector<Array> explore_schedules(const ScheduleRun& run, uint64_t first_seed, int64_t count, int num_inputs,
                                     const std::string& title, SourceLoc loc) {
  auto replay = [](uint64_t seed) {
    return fmt::format("with InterpretParams{{.dma_execution_mode = pl::DmaExecutionMode::on_wait, "
                       ".random_seed = {}, .num_schedules = 1}}",
                       seed);
  };
  std::vector<Array> first;
  for (int64_t s = 0; s < count; ++s) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(s);
    rt::BlockWriteLog writes;
    uint64_t instant = 0;
    std::vector<Array> outs;
    try {
      outs = run({.block_writes = &writes, .seed = seed, .instant = &instant});
    } catch (const RuntimeError& e) {
      // Retold, so that it keeps its time (and notes) among the failures of other devices.
      throw e.retold(fmt::format("{}\n  schedule: random_seed={} ({} of {} explored); replay it {}", e.problem(), seed,
                                 s + 1, count, replay(seed)));
    }
    if (s == 0) {
      first = std::move(outs);
      continue;
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      const std::optional<rt::Mismatch> m = rt::first_mismatch(outs[o], first[o], rt::Tolerance{0, 0});
      if (!m) continue;
      const rt::BlockWrite* w = writes.last_holding(num_inputs + static_cast<int64_t>(o), m->index);
      throw RuntimeError(
          fmt::format("{}: output {} depends on the schedule: at index ({}) it is {} under random_seed={} but {} under "
                      "random_seed={} ({} of {} elements differ). The order in which copies complete, or the "
                      "interleaving of cores and devices, changed the result: a copy's destination is read or written "
                      "before the wait that orders it, or two copies write the same memory, or a core or device reads "
                      "what another writes without a semaphore or barrier ordering them; with random_parallel_order, the order "
                      "of the parallel grid points changed too, so the kernel may carry state across a parallel dim. "
                      "Replay it {}",
                      title, o, fmt::join(m->index, ", "), m->compiled, seed, m->interpreted, first_seed, m->count,
                      outs[o].size(), replay(seed)),
          w ? w->point : ExecutionPoint{}, loc, instant ? instant : next_failure_sequence());
    }
  }
  return first;
}

}  // namespace tessera::detail
