#include "runtime/interpreter/interpreter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <map>
#include <memory>
#include <random>

#include "jit/ir/operands.h"
#include "jit/ir/printer.h"
#include "runtime/array_ops.h"
#include "runtime/block_ops.h"
#include "runtime/grid_check.h"
#include "runtime/interpreter/layout_ops.h"
#include "runtime/interpreter/scratch_writes.h"
#include "runtime/race_detector.h"

namespace tessera::rt {

using ir::OpKind;

struct Interpreter::Frame {
  CoreContext& ctx;
  std::vector<Value> env;  // by ValueId
  // The storage of every alloc op, made when the kernel starts (as compiled code does, so that other
  // devices can address it at once); an alloc op re-poisons it each time it runs.
  std::map<ir::OpId, std::unique_ptr<Buffer>> storage;
  // The allocs of the open regions, innermost last: released when their region ends.
  std::vector<const ir::Op*> live;
  // The last shadow each view op past its ref's bounds made (out_of_bounds_reads = uninitialized,
  // buffer_bounds = padded): a buffer of the window's shape, with the part of the ref it holds (what
  // loads refresh and stores write back, and what race detection sees accessed) at element `at`.
  struct Shadow {
    std::unique_ptr<Buffer> buffer;
    RefView in_bounds;
    int64_t at = 0;
  };
  std::map<ir::OpId, Shadow> shadows;
  const Shadow* shadow_of(const RefView& r) const {
    for (const auto& [id, shadow] : shadows)
      if (shadow.buffer.get() == r.buffer) return &shadow;
    return nullptr;
  }
  // The lane-checked views (by result) whose last window reaches past their ref: what a masked
  // access through one checks lane by lane. A view back in bounds is removed.
  struct LaneWindow {
    Shape ref_shape;
    std::vector<int64_t> starts;
    const ir::ViewAttr* attr;
    std::string name;
  };
  std::map<ir::ValueId, LaneWindow> lane_windows;
  // Which elements of the core's scratch the kernel wrote: what a load may read (empty when
  // uninitialised memory reads as zero, which the user asked for).
  ScratchWrites writes;
};

namespace {

const Array& tensor(const Value& v) { return std::get<Array>(v); }
const RefView& ref(const Value& v) { return std::get<RefView>(v); }
int64_t as_int(const Value& v) { return tensor(v).item_int(); }
int64_t* semaphore(const Value& v) { return reinterpret_cast<int64_t*>(ref(v).address(0)); }

// The memory a window spans.
std::pair<const std::byte*, const std::byte*> extent(const RefView& r) {
  const int64_t es = dtype_size(r.buffer->dtype);
  const std::byte* lo = r.buffer->data() + r.offset * es;
  return {lo, lo + window_extent(r.shape, r.strides, es)};
}

// An op InterpretOptions::skip_floating_point_ops skips: one that computes a float value from values
// (not a constant, a load or anything touching memory).
bool computes_float(const ir::Op& op, const ir::Function& fn) {
  if (op.results.size() != 1 || !is_float(fn.type(op.results[0]).dtype)) return false;
  switch (op.kind) {
    TESSERA_ARITHMETIC_OPS(TESSERA_OP_CASE)
    TESSERA_UNARY_OPS(TESSERA_OP_CASE)
    case OpKind::Cast:
    case OpKind::Select:
    case OpKind::Iota:
    case OpKind::BroadcastTo:
    case OpKind::Reshape:
    case OpKind::Transpose:
    case OpKind::Slice:
    case OpKind::Concatenate:
    case OpKind::Bitcast:
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::DotGeneral: return true;
    default: return false;
  }
}

// Race detection (runtime/race_detector.h): a core's read or write of a window, when the launch detects races.
void note(CoreContext& ctx, AccessKind kind, const RefView& ref, SourceLoc loc, const Array* mask = nullptr) {
  if (ctx.races) ctx.races->access(ctx.race_actor, kind, ref, mask, loc);
}

}  // namespace

namespace {

// Which view ops make a ref that is only loaded from (and, with `stores`, stored into), directly or
// through further views: the views an out-of-bounds read may pass, since nothing stores through them
// (or that padded bounds apply to, since no copy goes through them).
std::vector<bool> load_only_views(const ir::Function& fn, bool stores) {
  std::vector<std::vector<ir::OpId>> users(fn.values.size());
  for (ir::OpId id = 0; id < fn.ops.size(); ++id)
    for (ir::ValueId v : fn.ops[id].operands) users[v].push_back(id);
  enum class State : uint8_t { unknown, visiting, yes, no };
  std::vector<State> state(fn.ops.size(), State::unknown);
  std::function<bool(ir::OpId)> read_only = [&](ir::OpId id) {
    if (state[id] != State::unknown) return state[id] == State::yes;
    state[id] = State::visiting;  // a cycle cannot occur; if it did, it would not count as read-only
    const ir::ValueId result = fn.ops[id].results[0];
    bool ok = true;
    for (ir::OpId u : users[result]) {
      const ir::Op& use = fn.ops[u];
      ok = use.kind == OpKind::Load                ? ir::load_operands(use).ref == result
           : use.kind == OpKind::Store && stores    ? ir::store_operands(use).ref == result
           : use.kind == OpKind::DotAccumulate && stores ? ir::dot_operands(use).acc == result
           : use.kind == OpKind::View                ? ir::window_operands(use).ref == result && read_only(u)
                                                     : false;
      if (!ok) break;
    }
    state[id] = ok ? State::yes : State::no;
    return ok;
  };
  std::vector<bool> out(fn.ops.size(), false);
  for (ir::OpId id = 0; id < fn.ops.size(); ++id)
    if (fn.ops[id].kind == OpKind::View) out[id] = read_only(id);
  return out;
}

}  // namespace

Interpreter::Interpreter(const ir::Function& fn, InterpretOptions options) : fn_(fn), options_(std::move(options)) {
  if (options_.uninitialized_out_of_bounds_reads) read_only_view_ = load_only_views(fn_, false);
  if (options_.padded_buffer_bounds) load_store_view_ = load_only_views(fn_, true);
  lane_checked_view_ = lane_checked_views(fn_);
  // Zero-filled memory is what the user asked to read, so reading it is no mistake.
  if (!options_.zero_uninitialized) tracked_scratch_ = ScratchWrites::tracked_allocs(fn_);
}

RefView Interpreter::out_of_bounds_window(Frame& frame, const ir::Op& op, const RefView& ref,
                                        std::span<const int64_t> starts) const {
  const ir::ViewAttr& attr = std::get<ir::ViewAttr>(op.attr);
  // Per dim of the ref: the view's steps k whose element start + k * stride lies in [0, extent).
  Shape shape, box;
  std::vector<int64_t> first;  // the first in-bounds step of each kept dim
  RefView in_bounds{ref.buffer, ref.offset, {}, {}};
  bool empty = false;
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    const int64_t start = starts[d], extent = ref.shape[d];
    if (dim.squeeze) {
      empty = empty || start < 0 || start >= extent;
      if (!empty) in_bounds.offset += start * ref.strides[d];
      continue;
    }
    // k >= ceil(-start / stride) and k <= (extent - 1 - start) / stride, within [0, size).
    const int64_t lo = start >= 0 ? 0 : (-start + dim.stride - 1) / dim.stride;
    const int64_t hi = start >= extent ? 0 : std::min(dim.size, (extent - 1 - start) / dim.stride + 1);
    shape.push_back(dim.size);
    first.push_back(lo);
    box.push_back(std::max<int64_t>(0, hi - lo));
    in_bounds.offset += (start + lo * dim.stride) * ref.strides[d];
    in_bounds.shape.push_back(box.back());
    in_bounds.strides.push_back(ref.strides[d] * dim.stride);
  }
  if (empty) in_bounds.shape.assign(in_bounds.shape.size(), 0);
  // Filled by every load through it (before_load); only loads and stores reach it.
  std::unique_ptr<Buffer> buffer = make_buffer(root_buffer_name(fn_, ir::window_operands(op).ref) + " (out of bounds)",
                                               ref.buffer->dtype, shape, ref.buffer->space, options_.zero_uninitialized);
  RefView whole = RefView::whole(*buffer);
  int64_t at = 0;
  for (size_t d = 0; d < first.size(); ++d) at += first[d] * whole.strides[d];
  frame.shadows[static_cast<ir::OpId>(&op - fn_.ops.data())] = {std::move(buffer), in_bounds, at};
  return whole;
}

bool Interpreter::within_padding(const RefView& ref, std::span<const int64_t> starts, const ir::ViewAttr& attr) const {
  if (!options_.padded_buffer_bounds || ref.offset != 0 || ref.shape != ref.buffer->shape) return false;
  const Shape padded = tpu_padded_shape(ref.buffer->shape, ref.buffer->dtype, ref.buffer->space);
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const ir::ViewDim& dim = attr.dims[d];
    const int64_t start = starts[d], last = dim.squeeze ? start : start + (dim.size - 1) * dim.stride;
    if ((dim.squeeze || dim.size > 0) && (start < 0 || last >= padded[d])) return false;
  }
  return true;
}

void Interpreter::before_access(Frame& frame, const RefView& r, AccessKind kind, const Array* mask, SourceLoc loc) const {
  const Frame::Shadow* shadow = frame.shadows.empty() ? nullptr : frame.shadow_of(r);
  if (!shadow) return note(frame.ctx, kind, r, loc, mask);
  // Poison, then what the ref holds now: the padding never keeps what a store put there, and the
  // lanes a masked store leaves out are written back as they are.
  const RefView whole = RefView::whole(*shadow->buffer);
  fill_poison(whole, options_.zero_uninitialized);
  if (num_elements(shadow->in_bounds.shape) > 0)
    copy_box(whole.address(shadow->at), whole.strides, shadow->in_bounds.read_address(0), shadow->in_bounds.strides,
             shadow->in_bounds.shape, dtype_size(r.buffer->dtype));
  note(frame.ctx, kind, shadow->in_bounds, loc);
}

void Interpreter::after_store(Frame& frame, const RefView& r, const Array* mask) const {
  if (!frame.writes.empty()) frame.writes.write(r, mask);
  const Frame::Shadow* shadow = frame.shadows.empty() ? nullptr : frame.shadow_of(r);
  if (!shadow || num_elements(shadow->in_bounds.shape) == 0) return;
  // Every lane of the window goes back, those a mask left out as they were: no more is written than
  // held a value before.
  if (!frame.writes.empty()) frame.writes.write(shadow->in_bounds);
  const RefView whole = RefView::whole(*shadow->buffer);
  copy_box(shadow->in_bounds.address(0), shadow->in_bounds.strides, whole.read_address(shadow->at), whole.strides,
           shadow->in_bounds.shape, dtype_size(r.buffer->dtype));
}

void Interpreter::check_lanes(Frame& frame, ir::ValueId ref, const Array& mask, bool store) const {
  if (frame.lane_windows.empty()) return;
  const auto it = frame.lane_windows.find(ref);
  if (it == frame.lane_windows.end()) return;
  const Frame::LaneWindow& w = it->second;
  check_masked_lanes(w.ref_shape, w.starts, *w.attr, mask, w.name, store);
}

bool Interpreter::is_grid_loop(const ir::Op& op) const {
  const auto& params = fn_.params();
  if (op.kind != OpKind::For || op.parent != fn_.body || params.size() < 2) return false;
  const ir::ForOperands operands = ir::for_operands(op);
  return operands.lb == params[params.size() - 2] && operands.ub == params.back();
}

void Interpreter::run_parallel_points_shuffled(Frame& frame, const ir::Op& op) const {
  // The loop and the pipeline around it read the core's step range from the two step parameters:
  // running it once per parallel point with the range narrowed to that point's steps makes each
  // point a chunk of its own, so every rule of the pipeline (first-step fetches, last-step
  // write-backs) holds as it does for a core's chunk.
  const auto& params = fn_.params();
  Value& first = frame.env[params[params.size() - 2]];
  Value& end = frame.env[params.back()];
  const int64_t lo = as_int(first), hi = as_int(end), per_point = std::max<int64_t>(1, frame.ctx.launch.steps_per_point);
  const int64_t points = (hi - lo) / per_point;
  std::vector<int64_t> order(static_cast<size_t>(points));
  for (int64_t p = 0; p < points; ++p) order[static_cast<size_t>(p)] = p;
  // Fisher-Yates over a generator whose sequence the standard fixes, so a seed replays everywhere.
  std::mt19937_64 rng(frame.ctx.launch.seed.value_or(options_.seed) * 0x9E3779B97F4A7C15ull +
                      static_cast<uint64_t>(frame.ctx.point.core));
  for (int64_t i = points - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[rng() % static_cast<uint64_t>(i + 1)]);
  const Value saved_first = first, saved_end = end;
  for (int64_t p : order) {
    frame.env[params[params.size() - 2]] = Array::scalar(static_cast<double>(lo + p * per_point), DType::index);
    frame.env[params.back()] = Array::scalar(static_cast<double>(lo + (p + 1) * per_point), DType::index);
    exec_op(frame, op, /*shuffled=*/true);
  }
  frame.env[params[params.size() - 2]] = saved_first;
  frame.env[params.back()] = saved_end;
}

void Interpreter::run_core(CoreContext& ctx, const OperandMemory& operands, StepRange steps) const {
  std::vector<Value> params;
  params.reserve(fn_.params().size());
  for (Buffer* b : operands.buffers) params.emplace_back(RefView::whole(*b));
  // A kernel over a grid takes its step range after the operands (an mpmd_map's runs once).
  if (fn_.params().size() > operands.buffers.size()) {
    params.emplace_back(Array::scalar(static_cast<double>(steps.lo), DType::index));
    params.emplace_back(Array::scalar(static_cast<double>(steps.hi), DType::index));
  }
  run(ctx, std::move(params));
}

void Interpreter::run(CoreContext& ctx, std::vector<Value> params) const {
  Frame frame{ctx, std::vector<Value>(fn_.values.size()), {}, {}};
  for (ir::OpId id = 0; id < fn_.ops.size(); ++id) {
    const ir::Op& op = fn_.ops[id];
    if (op.kind != OpKind::Alloc) continue;
    const Type& t = fn_.type(op.results[0]);
    std::unique_ptr<Buffer> b;
    try {
      b = make_buffer(std::get<std::string>(op.attr), t.dtype, t.shape, t.space, options_.zero_uninitialized);
    } catch (const std::bad_alloc&) {
      throw RuntimeError("out of memory while running the kernel", ctx.point, op.loc);
    } catch (const UserError& e) {  // make_buffer: out of memory, naming the buffer and its bytes
      throw RuntimeError(e.problem() + ": " + e.given(), ctx.point, op.loc);
    }
    ctx.add_region(static_cast<int64_t>(id), b->data(), t.num_elements() * dtype_size(t.dtype));
    // Named from the start, as compiled: a signal toward a region that never runs is checked at the end.
    if (is_semaphore(t.dtype))
      ctx.dma.add_semaphores(reinterpret_cast<const int64_t*>(b->data()), t.num_elements(), t.dtype, b->name,
                             semaphore_lifetime(fn_, op));
    if (!tracked_scratch_.empty() && tracked_scratch_[id]) frame.writes.begin(*b);
    frame.storage.emplace(id, std::move(b));
  }
  // Other devices stop reaching this core before its storage goes with the frame.
  struct Finish {
    CoreContext& ctx;
    ~Finish() { collective_finish(ctx); }
  } finish{ctx};
  try {
    collective_ready(ctx);
  } catch (const Fault& f) {
    throw f.at(ctx.point, ctx.group() ? ctx.group()->key().loc : SourceLoc{});
  }
  exec_region(frame, fn_.body, std::move(params));
  // The kernel's copies land before it counts as finished: in a launch group others may wait for them.
  // Then, if the kernel returns semaphores, it waits for the others' copies toward its outputs.
  try {
    ctx.dma.flush();
    collective_end(ctx);
  } catch (const Fault& f) {
    // In a launch group, at the pallas_call: the kernel's end has no line of its own.
    throw f.at(ctx.point, ctx.group() ? ctx.group()->key().loc : SourceLoc{});
  }
}

std::vector<Value> Interpreter::exec_region(Frame& frame, ir::RegionId region, std::vector<Value> args) const {
  const ir::Region& r = fn_.regions[region];
  for (size_t i = 0; i < r.args.size(); ++i) frame.env[r.args[i]] = std::move(args[i]);
  const size_t live_before = frame.live.size();
  std::vector<Value> yielded;
  for (ir::OpId id : r.ops) {
    const ir::Op& op = fn_.ops[id];
    if (op.kind == OpKind::Yield) {
      for (ir::ValueId v : op.operands) yielded.push_back(frame.env[v]);
      break;
    }
    try {
      exec_op(frame, op);
    } catch (const Fault& f) {
      throw f.at(frame.ctx.point, op.loc);
    } catch (const std::bad_alloc&) {
      throw RuntimeError("out of memory while running the kernel", frame.ctx.point, op.loc);
    }
  }
  // Allocations end with their region: their copies complete and their semaphores must be zero.
  while (frame.live.size() > live_before) {
    const ir::Op* alloc = frame.live.back();
    frame.live.pop_back();
    auto [lo, hi] = extent(RefView::whole(*frame.storage.at(static_cast<ir::OpId>(alloc - fn_.ops.data()))));
    try {
      frame.ctx.dma.release(lo, hi, /*forget=*/false);
    } catch (const Fault& f) {
      throw f.at(frame.ctx.point, alloc->loc);
    }
  }
  return yielded;
}

int64_t Interpreter::target(Frame& frame, const ir::Op& op, ir::OperandSpan device) const {
  if (!frame.ctx.device) throw Fault("a remote copy or signal outside a mesh: run the kernel inside pl::shard_map");
  std::vector<int64_t> ids;
  for (ir::ValueId v : device) ids.push_back(as_int(frame.env[v]));
  return target_device(*frame.ctx.device->mesh, ids, std::get<ir::DeviceAttr>(op.attr).logical);
}

void Interpreter::exec_op(Frame& frame, const ir::Op& op, bool shuffled) const {
  auto& env = frame.env;
  auto in = [&](size_t i) -> const Value& { return env[op.operands[i]]; };
  auto val = [&](ir::ValueId v) -> const Value& { return env[v]; };
  auto set = [&](Value v) { env[op.results[0]] = std::move(v); };
  auto result_type = [&]() -> const Type& { return fn_.type(op.results[0]); };

  if (options_.skip_floating_point_ops && computes_float(op, fn_)) {
    set(Array::full(result_type().shape, std::numeric_limits<double>::infinity(), result_type().dtype));
    return;
  }
  switch (op.kind) {
    case OpKind::Constant:
      set(splat(std::get<ir::Literal>(op.attr), result_type().dtype, result_type().shape));
      return;
    TESSERA_ARITHMETIC_OPS(TESSERA_OP_CASE)
    TESSERA_COMPARISON_OPS(TESSERA_OP_CASE)
      set(binary(op.kind, tensor(in(0)), tensor(in(1))));
      return;
    TESSERA_UNARY_OPS(TESSERA_OP_CASE)
      set(unary(op.kind, tensor(in(0))));
      return;
    case OpKind::Cast:
      set(tensor(in(0)).astype(result_type().dtype));
      return;
    case OpKind::Select:
      set(select(tensor(in(0)), tensor(in(1)), tensor(in(2))));
      return;
    case OpKind::Iota:
      set(iota(result_type().dtype, result_type().shape, std::get<int64_t>(op.attr)));
      return;
    case OpKind::BroadcastTo:
      set(broadcast_to(tensor(in(0)), result_type().shape));
      return;
    case OpKind::Reshape:
      set(tensor(in(0)).reshape(result_type().shape));
      return;
    case OpKind::Transpose:
      set(transpose(tensor(in(0)), std::get<std::vector<int64_t>>(op.attr)));
      return;
    case OpKind::Bitcast:
      set(bitcast(tensor(in(0)), result_type().dtype, result_type().shape));
      return;
    case OpKind::MultipleOf: {
      const int64_t x = as_int(in(0)), n = std::get<int64_t>(op.attr);
      if (x % n != 0)
        throw Fault(fmt::format("pl::multiple_of: the value is {}, which is not a multiple of {} as the kernel promised", x, n));
      set(in(0));
      return;
    }
    case OpKind::Concatenate: {
      std::vector<Array> parts;
      for (ir::ValueId v : op.operands) parts.push_back(tensor(val(v)));
      set(concatenate(parts, std::get<int64_t>(op.attr)));
      return;
    }
    case OpKind::Slice: {
      std::vector<int64_t> starts;
      for (ir::ValueId s : ir::window_operands(op).starts) starts.push_back(as_int(val(s)));
      set(slice_window(tensor(in(0)), starts, std::get<ir::ViewAttr>(op.attr)));
      return;
    }
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
      set(reduce(op.kind, tensor(in(0)), std::get<std::vector<int64_t>>(op.attr)));
      return;
    case OpKind::DotGeneral:
      set(dot_general(tensor(val(ir::dot_operands(op).lhs)), tensor(val(ir::dot_operands(op).rhs)), std::get<ir::DotAttr>(op.attr),
                      result_type().dtype));
      return;
    case OpKind::Alloc: {
      const Type& t = result_type();
      Buffer& buffer = *frame.storage.at(static_cast<ir::OpId>(&op - fn_.ops.data()));
      // The kernel's own allocations are fresh from its start (and other devices may have written them
      // since); a nested region's memory is poisoned afresh each time the region runs. Its semaphores
      // are not reset: they were zero when the region last ended (or it would have failed), and a
      // signal from another device may already have arrived for this run (docs/design.md §4.9).
      if (op.parent != fn_.body && !is_semaphore(t.dtype)) {
        fill_poison(RefView::whole(buffer), options_.zero_uninitialized);
        if (!tracked_scratch_.empty() && tracked_scratch_[static_cast<ir::OpId>(&op - fn_.ops.data())]) frame.writes.begin(buffer);
      }
      if (is_semaphore(t.dtype))
        frame.ctx.dma.add_semaphores(reinterpret_cast<const int64_t*>(buffer.data()), t.num_elements(), t.dtype,
                                     buffer.name, semaphore_lifetime(fn_, op));
      frame.live.push_back(&op);
      set(RefView::whole(buffer));
      return;
    }
    case OpKind::RemoteDmaStart: {
      const ir::DmaOperands operands = ir::dma_operands(op);
      const RefView& src = ref(val(operands.src));
      const RefView& dst = ref(val(operands.dst));
      const int64_t to = target(frame, op, operands.device);
      if (frame.ctx.races)
        frame.ctx.races->start_remote_copy(frame.ctx.race_actor, src, dst, semaphore(val(operands.send_sem)),
                                           semaphore(val(operands.recv_sem)), frame.ctx.device->first_member + to, to, op.loc);
      remote_copy(frame.ctx, src.read_address(0), src.strides, dst.read_address(0), dst.strides, src.shape,
                  dtype_size(src.buffer->dtype), semaphore(val(operands.send_sem)), semaphore(val(operands.recv_sem)),
                  to, op.loc);
      return;
    }
    case OpKind::RemoteSemaphoreSignal: {
      const ir::SemaphoreOperands operands = ir::semaphore_operands(op);
      const int64_t to = target(frame, op, operands.device);
      if (frame.ctx.races)
        frame.ctx.races->remote_signal(frame.ctx.race_actor, semaphore(val(operands.sem)), as_int(val(operands.amount)),
                                       frame.ctx.device->first_member + to);
      remote_signal(frame.ctx, semaphore(val(operands.sem)), as_int(val(operands.amount)), to, op.loc);
      return;
    }
    case OpKind::AxisIndex:
      set(Array::scalar(static_cast<double>(frame.ctx.device->coords.at(static_cast<size_t>(std::get<int64_t>(op.attr)))),
                        DType::i32));
      return;
    case OpKind::Scope: {
      std::vector<Value> results = exec_region(frame, op.regions[0], {});
      for (size_t i = 0; i < op.results.size(); ++i) env[op.results[i]] = std::move(results[i]);
      return;
    }
    case OpKind::DmaStart: {
      const ir::DmaOperands operands = ir::dma_operands(op);
      const RefView& src = ref(val(operands.src));
      const RefView& dst = ref(val(operands.dst));
      DmaEngine::Copy copy = window_copy(dst.address(0), dst.strides, src.read_address(0), src.strides, src.shape,
                                         dtype_size(src.buffer->dtype), semaphore(val(operands.send_sem)));
      if (frame.ctx.races) copy.race = frame.ctx.races->start_copy(frame.ctx.race_actor, src, dst, op.loc);
      // Written from the start on: reading it before the wait is a race, which race detection reports.
      if (!frame.writes.empty()) frame.writes.write(dst);
      frame.ctx.dma.start(std::move(copy));
      return;
    }
    case OpKind::DmaWait:
      frame.ctx.dma.wait(semaphore(val(ir::semaphore_operands(op).sem)), std::get<int64_t>(op.attr), /*dma=*/true, op.loc);
      return;
    case OpKind::SemaphoreSignal:
      frame.ctx.dma.signal(semaphore(val(ir::semaphore_operands(op).sem)), as_int(val(ir::semaphore_operands(op).amount)));
      return;
    case OpKind::SemaphoreWait:
      frame.ctx.dma.wait(semaphore(val(ir::semaphore_operands(op).sem)), as_int(val(ir::semaphore_operands(op).amount)),
                         /*dma=*/false, op.loc);
      return;
    case OpKind::SemaphoreRead:
      set(Array::scalar(static_cast<double>(frame.ctx.dma.read(semaphore(val(ir::semaphore_operands(op).sem)))), DType::i32));
      return;
    case OpKind::PipelineBegin:
      begin_pipeline(frame.ctx, std::get<int64_t>(op.attr));
      return;
    case OpKind::View: {
      const ir::WindowOperands operands = ir::window_operands(op);
      std::vector<int64_t> starts;
      for (ir::ValueId s : operands.starts) starts.push_back(as_int(val(s)));
      const ir::OpId id = static_cast<ir::OpId>(&op - fn_.ops.data());
      const auto& attr = std::get<ir::ViewAttr>(op.attr);
      if (lane_checked_view_[id] && !frame.lane_windows.empty()) frame.lane_windows.erase(op.results[0]);
      try {
        set(view(ref(val(operands.ref)), starts, attr, root_buffer_name(fn_, operands.ref)));
      } catch (const Fault&) {
        // Out of bounds: a read may pass (InterpretOptions::uninitialized_out_of_bounds_reads), a write
        // not; a load or store inside the buffer's padding may (padded_buffer_bounds).
        const RefView& r = ref(val(operands.ref));
        if ((!read_only_view_.empty() && read_only_view_[id]) ||
            (!load_store_view_.empty() && load_store_view_[id] && within_padding(r, starts, attr))) {
          set(out_of_bounds_window(frame, op, r, starts));
          return;
        }
        // Only masked accesses use it: they check the lanes they select (docs/design.md §4.5).
        if (!lane_checked_view_[id]) throw;
        frame.lane_windows[op.results[0]] = {r.shape, starts, &attr, root_buffer_name(fn_, operands.ref)};
        set(view_unchecked(r, starts, attr));
      }
      return;
    }
    case OpKind::Load: {
      const ir::LoadOperands operands = ir::load_operands(op);
      if (operands.mask != ir::kNone) check_lanes(frame, operands.ref, tensor(val(operands.mask)), false);
      const Array* mask = operands.mask == ir::kNone ? nullptr : &tensor(val(operands.mask));
      before_access(frame, ref(val(operands.ref)), AccessKind::read, mask, op.loc);
      if (!frame.writes.empty()) frame.writes.check_read(ref(val(operands.ref)), mask);
      if (operands.mask == ir::kNone) set(load(ref(val(operands.ref))));
      else
        set(load_masked(ref(val(operands.ref)), tensor(val(operands.mask)),
                        operands.other != ir::kNone ? &tensor(val(operands.other)) : nullptr, options_.zero_uninitialized));
      return;
    }
    case OpKind::Store: {
      const ir::StoreOperands operands = ir::store_operands(op);
      if (operands.mask != ir::kNone) check_lanes(frame, operands.ref, tensor(val(operands.mask)), true);
      const Array* mask = operands.mask == ir::kNone ? nullptr : &tensor(val(operands.mask));
      before_access(frame, ref(val(operands.ref)), AccessKind::write, mask, op.loc);
      if (operands.mask == ir::kNone) store(ref(val(operands.ref)), tensor(val(operands.value)));
      else store_masked(ref(val(operands.ref)), tensor(val(operands.value)), *mask);
      after_store(frame, ref(val(operands.ref)), mask);
      return;
    }
    case OpKind::DotAccumulate: {
      // As the unfused ops: the dot in the accumulator's dtype, then load, add and store.
      const ir::DotOperands operands = ir::dot_operands(op);
      const RefView& acc = ref(val(operands.acc));
      before_access(frame, acc, AccessKind::read, nullptr, op.loc);
      if (!frame.writes.empty()) frame.writes.check_read(acc);
      before_access(frame, acc, AccessKind::write, nullptr, op.loc);
      Array product = dot_general(tensor(val(operands.lhs)), tensor(val(operands.rhs)), std::get<ir::DotAttr>(op.attr),
                                  fn_.type(operands.acc).dtype);
      store(acc, binary(OpKind::Add, load(acc), product));
      after_store(frame, acc, nullptr);
      return;
    }
    case OpKind::If: {
      const bool c = tensor(in(0)).data_as<bool>()[0];
      std::vector<Value> results = exec_region(frame, op.regions[c ? 0 : 1], {});
      for (size_t i = 0; i < op.results.size(); ++i) env[op.results[i]] = std::move(results[i]);
      return;
    }
    case OpKind::For: {
      if (options_.random_parallel_order && !shuffled && is_grid_loop(op)) {
        run_parallel_points_shuffled(frame, op);
        return;
      }
      const ir::ForOperands operands = ir::for_operands(op);
      const Value& lb = val(operands.lb);
      const int64_t lo = as_int(lb), hi = as_int(val(operands.ub)), step = as_int(val(operands.step));
      if (step <= 0) throw Fault(fmt::format("loop step must be positive, got {}", step));
      const DType iv_type = tensor(lb).dtype();
      std::vector<Value> carried;
      for (ir::ValueId v : operands.inits) carried.push_back(val(v));
      for (int64_t iv = lo; iv < hi; iv += step) {
        std::vector<Value> args;
        args.reserve(carried.size() + 1);
        args.push_back(Array::scalar(static_cast<double>(iv), iv_type));
        for (Value& c : carried) args.push_back(std::move(c));
        carried = exec_region(frame, op.regions[0], std::move(args));
      }
      for (size_t i = 0; i < op.results.size(); ++i) env[op.results[i]] = std::move(carried[i]);
      return;
    }
    case OpKind::While: {
      std::vector<Value> carried;
      for (ir::ValueId v : op.operands) carried.push_back(val(v));
      for (;;) {
        // A loop that never ends can still be cancelled (a launch that failed elsewhere).
        if (frame.ctx.launch.cancelled()) throw Cancelled{};
        if (!tensor(exec_region(frame, op.regions[0], carried)[0]).data_as<bool>()[0]) break;
        carried = exec_region(frame, op.regions[1], std::move(carried));
      }
      for (size_t i = 0; i < op.results.size(); ++i) env[op.results[i]] = std::move(carried[i]);
      return;
    }
    case OpKind::GridPoint: {
      if (frame.ctx.launch.cancelled()) throw Cancelled{};
      const bool nested = std::get<int64_t>(op.attr) > 0;
      auto& point = nested ? frame.ctx.point.inner_point : frame.ctx.point.grid_point;
      if (!nested) frame.ctx.point.inner_point.clear();
      point.resize(op.operands.size());
      for (size_t i = 0; i < op.operands.size(); ++i) point[i] = as_int(in(i));
      if (!nested) {
        frame.ctx.dma.yield_point();  // a grid step is a scheduling point of a seed schedule
        enter_grid_step(frame.ctx);
        if (options_.grid_point_recorder) {
          std::lock_guard lock(recorder_mutex_);
          options_.grid_point_recorder(point, frame.ctx.point.core);
        }
      }
      return;
    }
    case OpKind::FetchBlock:
    case OpKind::WritebackBlock: {
      const auto& attr = std::get<ir::BlockCopyAttr>(op.attr);
      const ir::BlockCopyOperands operands = ir::block_copy_operands(fn_, op);
      const RefView& src = ref(val(operands.src()));
      const RefView& dst = ref(val(operands.dst()));
      std::vector<int64_t> starts, sizes;
      for (ir::ValueId s : operands.starts) starts.push_back(as_int(val(s)));
      for (ir::ValueId s : operands.sizes) sizes.push_back(as_int(val(s)));
      const BlockWindow window(attr, sizes);
      const bool fetch = operands.fetch;
      // A BoundedSlice of size 0 writes nothing back, so it is no revisit of the block at its start.
      if (!fetch && std::find(sizes.begin(), sizes.end(), 0) == sizes.end()) check_revisit(frame.ctx, attr, starts);
      if (BlockWriteLog* log = frame.ctx.launch.block_writes; log && !fetch && attr.pipeline == 0)
        log->add({attr.operand, starts, src.shape, frame.ctx.point});
      // What the copy reads and writes, for race detection: the block's in-bounds part of the array.
      std::pair<RefView, RefView> moved;  // (source, destination)
      if (frame.ctx.races) {
        auto [in_array, in_block] = block_copy_windows(fetch ? src : dst, fetch ? dst : src, starts, window);
        moved = fetch ? std::pair(in_array, dst) : std::pair(in_block, in_array);
        if (operands.sem == ir::kNone) {
          note(frame.ctx, AccessKind::read, moved.first, op.loc);
          note(frame.ctx, AccessKind::write, moved.second, op.loc);
        }
      }
      // A write-back into scratch (an emit_pipeline whose output is scratch) writes the block's part of it.
      if (!fetch && !frame.writes.empty()) frame.writes.write(block_copy_windows(dst, src, starts, window).first);
      const bool zero = options_.zero_uninitialized;
      auto move = [fetch, src, dst, starts, window, zero, name = attr.name] {
        if (fetch) {
          fetch_block(src, dst, starts, zero, name, window);
          return;
        }
        // Memory nobody wrote is poison (docs/design.md §4.6): once its block is written back, the
        // buffer holds the next block, which no step has written yet, so a step that skips writing
        // its block shows poison there instead of the block before it.
        writeback_block(src, dst, starts, name, window);
        if (src.buffer != dst.buffer) fill_poison(src, zero);
      };
      if (operands.sem == ir::kNone) {
        move();
        return;
      }
      // Asynchronous: a DMA of the block's bytes toward the semaphore.
      DmaEngine::Copy copy;
      copy.move = std::move(move);
      copy.sem = semaphore(val(operands.sem));
      copy.bytes = num_elements((fetch ? dst : src).shape) * dtype_size(src.buffer->dtype);
      std::tie(copy.src_lo, copy.src_hi) = extent(src);
      std::tie(copy.dst_lo, copy.dst_hi) = extent(dst);
      if (frame.ctx.races) copy.race = frame.ctx.races->start_copy(frame.ctx.race_actor, moved.first, moved.second, op.loc);
      frame.ctx.dma.start(std::move(copy));
      return;
    }
    case OpKind::BlockView: {
      const ir::WindowOperands operands = ir::window_operands(op);
      std::vector<int64_t> starts;
      for (ir::ValueId s : operands.starts) starts.push_back(as_int(val(s)));
      set(block_view(ref(val(operands.ref)), result_type().shape, starts, std::get<ir::BlockCopyAttr>(op.attr).name));
      return;
    }
    case OpKind::CheckGrid: {
      std::vector<int64_t> sizes;
      for (size_t i = 0; i < op.operands.size(); ++i) sizes.push_back(as_int(in(i)));
      if (auto error = grid_sizes_error(sizes, std::get<std::string>(op.attr))) throw Fault(*error);
      return;
    }
    case OpKind::TraceStart:
    case OpKind::TraceStop:
      kernel_scope(frame.ctx, std::get<std::string>(op.attr), op.kind == OpKind::TraceStart);
      return;
    case OpKind::DebugPrint: {
      std::vector<const Array*> values;
      for (size_t i = 0; i < op.operands.size(); ++i) values.push_back(&tensor(in(i)));
      debug_print(frame.ctx.point, std::get<std::string>(op.attr), values);
      return;
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
    case OpKind::Pipeline:
    case OpKind::Yield:
      break;
  }
  throw InternalError("interpreter", fmt::format("`{}` must be lowered before it runs", ir::mnemonic(op.kind)),
                      ir::print(fn_));
}

}  // namespace tessera::rt
