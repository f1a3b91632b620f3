// pallas_call: trace a kernel over a grid of blocks and get back a callable over pl::Arrays.
//
//   auto call = pl::pallas_call(kernel, pl::GridSpec{...}, pl::ShapeDtype({m, n}, pl::f32), {...});
//   pl::Array out = call(x, y);   // traced and compiled on the first call for these shapes, cached after
//
// Several outputs: pass a std::vector<pl::ShapeDtype>; the call returns a std::vector<pl::Array>.
// The kernel takes pl::Ref parameters in Pallas order (scalar-prefetch refs, inputs, outputs,
// scratch) and returns void; both are checked at compile time.
//
// Front-end layer (dsl/): this is where tracing, the passes and a backend meet.
#pragma once

#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "dsl/signature.h"
#include "dsl/specs.h"
#include "runtime/array.h"

namespace tessera {

namespace detail {

struct KernelFn {
  int arity = 0;
  std::function<void(std::span<Ref>)> fn;
};

// What a callable is as a kernel: one over pl::Ref parameters returning void, or why not.
enum class KernelForm { ok, not_over_refs, returns_value };
template <class K>
constexpr KernelForm kernel_form() {
  using F = std::decay_t<K>;
  constexpr int n = arity_of<F, Ref>();
  if constexpr (n < 0) return KernelForm::not_over_refs;
  else if constexpr (!std::is_void_v<decltype(invoke_n<n>(std::declval<F&>(), std::declval<std::vector<Ref>&>()))>)
    return KernelForm::returns_value;
  else return KernelForm::ok;
}

// A kernel that does not fit is a compile-time error, with the message of the static_assert.
template <class K>
KernelFn wrap_kernel(K&& kernel) {
  using F = std::decay_t<K>;
  constexpr KernelForm form = kernel_form<K>();
  static_assert(form != KernelForm::not_over_refs,
                "tessera: a kernel must take pl::Ref parameters (scalar-prefetch refs, inputs, outputs, scratch, in "
                "that order): void kernel(pl::Ref x, pl::Ref o) { ... }");
  static_assert(form != KernelForm::returns_value,
                "tessera: a kernel must return void: it writes its results through its output refs");
  if constexpr (form == KernelForm::ok) {
    constexpr int n = arity_of<F, Ref>();
    return KernelFn{n, [k = F(std::forward<K>(kernel))](std::span<Ref> refs) mutable { invoke_n<n>(k, refs); }};
  } else {
    return KernelFn{};
  }
}

// Everything a pallas_call was given.
struct CallSpec {
  KernelFn kernel;
  int num_scalar_prefetch = 0;
  std::vector<int64_t> grid;
  std::vector<std::string> grid_names;  // empty, or one per grid dim (pl::axis)
  std::vector<Grid::PrefetchDim> grid_from_prefetch;  // dims sized at call time (ir::kDynamicDim in grid)
  std::vector<BlockSpec> in_specs, out_specs;
  std::vector<ScratchShape> scratch_shapes;
  std::vector<ShapeDtype> out_shapes;
  CallOptions options;
  SourceLoc loc;
};

class CallImpl;
std::shared_ptr<CallImpl> make_call(CallSpec spec);
std::vector<Array> run_call(CallImpl& call, std::span<const Array> args, SourceLoc loc);
// The traced (or lowered) IR of the call for these arguments.
const ir::Function& call_ir(CallImpl& call, std::span<const Array> args, bool lowered, SourceLoc loc);
const CallOptions& call_options(const CallImpl& call);
bool call_interpreted(const CallImpl& call);

}  // namespace detail

// An argument of a call, remembering the line of the call.
struct ArrayArg {
  const Array& array;
  SourceLoc loc;
  ArrayArg(const Array& a, std::source_location l = std::source_location::current()) : array(a), loc(l) {}
};

namespace detail {

// The call operators of a kernel call over pl::Arrays, returning one Array or all outputs.
// `Call::launch(args, loc)` runs it.
template <class Call, class Result>
class ArrayCall {
 public:
  Result operator()(std::source_location loc = std::source_location::current()) const { return run({}, loc); }
  template <class... A>
    requires(std::is_convertible_v<const A&, const Array&> && ...)
  Result operator()(ArrayArg first, const A&... rest) const {
    std::vector<Array> args{first.array, rest...};
    return run(args, first.loc);
  }
  Result operator()(const std::vector<Array>& args, std::source_location loc = std::source_location::current()) const {
    return run(args, loc);
  }

 private:
  Result run(const std::vector<Array>& args, SourceLoc loc) const {
    std::vector<Array> out = static_cast<const Call&>(*this).launch(args, loc);
    if constexpr (std::is_same_v<Result, Array>) return out.at(0);
    else return out;
  }
};

}  // namespace detail

template <class Result>
class PallasCall : public detail::ArrayCall<PallasCall<Result>, Result> {
 public:
  explicit PallasCall(std::shared_ptr<detail::CallImpl> impl) : impl_(std::move(impl)) {}

  // The IR as traced, and after all passes, for these arguments (tools, golden tests, debugging);
  // print it with ir::print.
  const ir::Function& traced(const std::vector<Array>& args,
                             std::source_location loc = std::source_location::current()) const {
    return detail::call_ir(*impl_, args, false, loc);
  }
  const ir::Function& lowered(const std::vector<Array>& args,
                              std::source_location loc = std::source_location::current()) const {
    return detail::call_ir(*impl_, args, true, loc);
  }
  // Whether this call runs in the interpreter (CallOptions::interpret, or TESSERA_INTERPRET set when
  // the call was made) rather than as compiled code.
  bool interpreted() const { return detail::call_interpreted(*impl_); }
  // What the call was told about its cost (pl.CostEstimate), for tools that schedule around it.
  const std::optional<CostEstimate>& cost_estimate() const { return detail::call_options(*impl_).cost_estimate; }
  const std::string& name() const { return detail::call_options(*impl_).name; }

 private:
  friend class detail::ArrayCall<PallasCall<Result>, Result>;
  std::vector<Array> launch(const std::vector<Array>& args, SourceLoc loc) const {
    return detail::run_call(*impl_, args, loc);
  }
  std::shared_ptr<detail::CallImpl> impl_;
};

namespace detail {
template <class K>
CallSpec call_spec(K&& kernel, int num_prefetch, const Grid& grid, std::vector<BlockSpec> in_specs,
                   std::vector<BlockSpec> out_specs, std::vector<ScratchShape> scratch, std::vector<ShapeDtype> outs,
                   CallOptions options, SourceLoc loc) {
  return CallSpec{wrap_kernel(std::forward<K>(kernel)), num_prefetch, grid.dims(), grid.names(), grid.prefetch_dims(), std::move(in_specs),
                  std::move(out_specs), std::move(scratch), std::move(outs), std::move(options), loc};
}
}  // namespace detail

template <class K>
PallasCall<Array> pallas_call(K&& kernel, const GridSpec& spec, const ShapeDtype& out_shape, CallOptions options = {},
                              std::source_location loc = std::source_location::current()) {
  return PallasCall<Array>(detail::make_call(detail::call_spec(std::forward<K>(kernel), 0, spec.grid, spec.in_specs,
                                                               spec.out_specs, spec.scratch_shapes, {out_shape},
                                                               std::move(options), loc)));
}
template <class K>
PallasCall<std::vector<Array>> pallas_call(K&& kernel, const GridSpec& spec, const std::vector<ShapeDtype>& out_shapes,
                                           CallOptions options = {},
                                           std::source_location loc = std::source_location::current()) {
  return PallasCall<std::vector<Array>>(detail::make_call(detail::call_spec(std::forward<K>(kernel), 0, spec.grid,
                                                                            spec.in_specs, spec.out_specs,
                                                                            spec.scratch_shapes, out_shapes,
                                                                            std::move(options), loc)));
}
template <class K>
PallasCall<Array> pallas_call(K&& kernel, const PrefetchScalarGridSpec& spec, const ShapeDtype& out_shape,
                              CallOptions options = {}, std::source_location loc = std::source_location::current()) {
  return PallasCall<Array>(detail::make_call(detail::call_spec(std::forward<K>(kernel), spec.num_scalar_prefetch,
                                                               spec.grid, spec.in_specs, spec.out_specs,
                                                               spec.scratch_shapes, {out_shape}, std::move(options), loc)));
}
template <class K>
PallasCall<std::vector<Array>> pallas_call(K&& kernel, const PrefetchScalarGridSpec& spec,
                                           const std::vector<ShapeDtype>& out_shapes, CallOptions options = {},
                                           std::source_location loc = std::source_location::current()) {
  return PallasCall<std::vector<Array>>(detail::make_call(
      detail::call_spec(std::forward<K>(kernel), spec.num_scalar_prefetch, spec.grid, spec.in_specs, spec.out_specs,
                        spec.scratch_shapes, out_shapes, std::move(options), loc)));
}

}  // namespace tessera
