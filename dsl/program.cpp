#include "dsl/program.h"

#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "jit/ir/printer.h"
#include "jit/llvm/compiler.h"
#include "jit/lowering/lowering.h"
#include "runtime/config.h"
#include "runtime/interpreter/interpreter.h"

namespace tessera::detail {

// Whether a call made with these options runs in the interpreter: when it asks for it, or when
// TESSERA_INTERPRET is set as the call is made.
namespace {
bool runs_interpreted(const CallOptions& options) { return options.interpret.has_value() || config::interpret(); }
}  // namespace

CallBase::CallBase(std::string_view api, CallOptions& options) {
  if (options.name.empty()) options.name = "kernel";
  name_ = options.name;
  title_ = fmt::format("{} `{}`", api, name_);
  interpreted_ = runs_interpreted(options);
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

void build_executable(rt::Executable& exe, const ir::Function& traced, const CallOptions& options, bool interpreted,
                      const std::string& title) {
  passes::LoweringOptions lo;
  lo.vmem_limit_bytes = options.compiler_params.vmem_limit_bytes.value_or(lo.vmem_limit_bytes);
  lo.call_site = exe.key.loc;
  exe.lowered = passes::lower(traced, lo);
  if (options.debug)
    std::fprintf(stderr, "// ---- %s: traced ----\n%s// ---- lowered ----\n%s", title.c_str(), ir::print(traced).c_str(),
                 ir::print(exe.lowered).c_str());
  exe.communicates = ir::communicates(exe.lowered);
  if (interpreted) {
    rt::InterpretOptions io;
    if (const auto& ip = options.interpret) {
      io.zero_uninitialized = ip->uninitialized_memory == UninitializedMemory::zero;
      exe.checked = rt::CheckedCores{ip->num_cores_or_threads,
                                     ip->dma_execution_mode == DmaExecutionMode::on_wait ? rt::DmaMode::on_wait
                                                                                         : rt::DmaMode::eager,
                                     ip->random_seed, io.zero_uninitialized};
    }
    exe.backend = std::make_unique<rt::Interpreter>(exe.lowered, io);
  } else {
    std::shared_ptr<const jit::CompiledKernel> kernel = jit::compile(exe.lowered, options.compiler_params.target, exe.key.loc);
    const rt::KernelEntry entry = kernel->entry();
    exe.backend = std::make_unique<rt::CompiledCode>(entry, std::move(kernel));
  }
}

}  // namespace tessera::detail
