#include "runtime/interpreter/interpreter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>

#include "jit/ir/printer.h"
#include "runtime/block_ops.h"

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

}  // namespace

Interpreter::Interpreter(const ir::Function& fn, InterpretOptions options) : fn_(fn), options_(options) {}

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
    }
    ctx.add_region(static_cast<int64_t>(id), b->data(), t.num_elements() * dtype_size(t.dtype));
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
    throw RuntimeError(f.what(), ctx.point, ctx.group() ? ctx.group()->key().loc : SourceLoc{});
  }
  exec_region(frame, fn_.body, std::move(params));
  // The kernel's copies land before it counts as finished: in a launch group others may wait for them.
  try {
    ctx.dma.flush();
  } catch (const Fault& f) {
    throw RuntimeError(f.what(), ctx.point, SourceLoc{});
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
      throw RuntimeError(f.what(), frame.ctx.point, op.loc);
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
      throw RuntimeError(f.what(), frame.ctx.point, alloc->loc);
    }
  }
  return yielded;
}

int64_t Interpreter::target(Frame& frame, const ir::Op& op, size_t first) const {
  if (!frame.ctx.device) throw Fault("a remote copy or signal outside a mesh: run the kernel inside pl::shard_map");
  std::vector<int64_t> ids;
  for (size_t i = first; i < op.operands.size(); ++i) ids.push_back(as_int(frame.env[op.operands[i]]));
  return target_device(*frame.ctx.device->mesh, ids, std::get<ir::DeviceAttr>(op.attr).logical);
}

void Interpreter::exec_op(Frame& frame, const ir::Op& op) const {
  auto& env = frame.env;
  auto in = [&](size_t i) -> const Value& { return env[op.operands[i]]; };
  auto set = [&](Value v) { env[op.results[0]] = std::move(v); };
  auto result_type = [&]() -> const Type& { return fn_.type(op.results[0]); };

  switch (op.kind) {
    case OpKind::Constant:
      set(splat(std::get<ir::Literal>(op.attr), result_type().dtype, result_type().shape));
      return;
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Rem:
    case OpKind::Pow:
    case OpKind::Max:
    case OpKind::Min:
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Xor:
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge:
      set(binary(op.kind, tensor(in(0)), tensor(in(1))));
      return;
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Not:
    case OpKind::Exp:
    case OpKind::Log:
    case OpKind::Tanh:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
    case OpKind::Logistic:
    case OpKind::Sin:
    case OpKind::Cos:
    case OpKind::Floor:
    case OpKind::Ceil:
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
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
      set(reduce(op.kind, tensor(in(0)), std::get<std::vector<int64_t>>(op.attr)));
      return;
    case OpKind::DotGeneral:
      set(dot_general(tensor(in(0)), tensor(in(1)), std::get<ir::DotAttr>(op.attr), result_type().dtype));
      return;
    case OpKind::Alloc: {
      const Type& t = result_type();
      Buffer& buffer = *frame.storage.at(static_cast<ir::OpId>(&op - fn_.ops.data()));
      // The kernel's own allocations are fresh from its start (and other devices may have written them
      // since); a nested region's start afresh each time the region runs.
      if (op.parent != fn_.body) fill_poison(RefView::whole(buffer), options_.zero_uninitialized || is_semaphore(t.dtype));
      if (is_semaphore(t.dtype))
        frame.ctx.dma.add_semaphores(reinterpret_cast<const int64_t*>(buffer.data()), t.num_elements(), t.dtype,
                                     buffer.name, op.parent == fn_.body);
      frame.live.push_back(&op);
      set(RefView::whole(buffer));
      return;
    }
    case OpKind::RemoteDmaStart: {
      const RefView& src = ref(in(0));
      const RefView& dst = ref(in(1));
      remote_copy(frame.ctx, src.read_address(0), src.strides, dst.read_address(0), dst.strides, src.shape,
                  dtype_size(src.buffer->dtype), semaphore(in(2)), semaphore(in(3)), target(frame, op, 4), op.loc);
      return;
    }
    case OpKind::RemoteSemaphoreSignal:
      remote_signal(frame.ctx, semaphore(in(0)), as_int(in(1)), target(frame, op, 2), op.loc);
      return;
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
      const RefView& src = ref(in(0));
      const RefView& dst = ref(in(1));
      frame.ctx.dma.start(window_copy(dst.address(0), dst.strides, src.read_address(0), src.strides, src.shape,
                                      dtype_size(src.buffer->dtype), semaphore(in(2))));
      return;
    }
    case OpKind::DmaWait:
      frame.ctx.dma.wait(semaphore(in(0)), std::get<int64_t>(op.attr), /*dma=*/true, op.loc);
      return;
    case OpKind::SemaphoreSignal:
      frame.ctx.dma.signal(semaphore(in(0)), as_int(in(1)));
      return;
    case OpKind::SemaphoreWait:
      frame.ctx.dma.wait(semaphore(in(0)), as_int(in(1)), /*dma=*/false, op.loc);
      return;
    case OpKind::SemaphoreRead:
      set(Array::scalar(static_cast<double>(frame.ctx.dma.read(semaphore(in(0)))), DType::i32));
      return;
    case OpKind::PipelineBegin:
      begin_pipeline(frame.ctx, std::get<int64_t>(op.attr));
      return;
    case OpKind::View: {
      std::vector<int64_t> starts;
      for (size_t i = 1; i < op.operands.size(); ++i) starts.push_back(as_int(in(i)));
      set(view(ref(in(0)), starts, std::get<ir::ViewAttr>(op.attr), root_buffer_name(fn_, op.operands[0])));
      return;
    }
    case OpKind::Load:
      if (op.operands.size() == 1) set(load(ref(in(0))));
      else
        set(load_masked(ref(in(0)), tensor(in(1)), op.operands.size() > 2 ? &tensor(in(2)) : nullptr,
                        options_.zero_uninitialized));
      return;
    case OpKind::Store:
      if (op.operands.size() == 2) store(ref(in(0)), tensor(in(1)));
      else store_masked(ref(in(0)), tensor(in(1)), tensor(in(2)));
      return;
    case OpKind::If: {
      const bool c = tensor(in(0)).data_as<bool>()[0];
      std::vector<Value> results = exec_region(frame, op.regions[c ? 0 : 1], {});
      for (size_t i = 0; i < op.results.size(); ++i) env[op.results[i]] = std::move(results[i]);
      return;
    }
    case OpKind::For: {
      const Value& lb = in(0);
      const int64_t lo = as_int(lb), hi = as_int(in(1)), step = as_int(in(2));
      if (step <= 0) throw Fault(fmt::format("loop step must be positive, got {}", step));
      const DType iv_type = tensor(lb).dtype();
      std::vector<Value> carried;
      for (size_t i = 3; i < op.operands.size(); ++i) carried.push_back(in(i));
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
    case OpKind::GridPoint: {
      if (frame.ctx.launch.cancelled()) throw Cancelled{};
      const bool nested = std::get<int64_t>(op.attr) > 0;
      auto& point = nested ? frame.ctx.point.inner_point : frame.ctx.point.grid_point;
      if (!nested) frame.ctx.point.inner_point.clear();
      point.resize(op.operands.size());
      for (size_t i = 0; i < op.operands.size(); ++i) point[i] = as_int(in(i));
      if (!nested) enter_grid_step(frame.ctx);
      return;
    }
    case OpKind::FetchBlock:
    case OpKind::WritebackBlock: {
      const auto& attr = std::get<ir::BlockCopyAttr>(op.attr);
      const RefView& src = ref(in(0));
      const RefView& dst = ref(in(1));
      const size_t starts_end = 2 + src.shape.size();
      std::vector<int64_t> starts;
      for (size_t i = 2; i < starts_end; ++i) starts.push_back(as_int(in(i)));
      const bool fetch = op.kind == OpKind::FetchBlock;
      if (!fetch) check_revisit(frame.ctx, attr, starts);
      const bool zero = options_.zero_uninitialized;
      auto move = [fetch, src, dst, starts, zero, name = attr.name] {
        if (fetch) fetch_block(src, dst, starts, zero, name);
        else writeback_block(src, dst, starts, name);
      };
      if (op.operands.size() == starts_end) {
        move();
        return;
      }
      // Asynchronous: a DMA of the block's bytes toward the semaphore.
      DmaEngine::Copy copy;
      copy.move = std::move(move);
      copy.sem = semaphore(in(starts_end));
      copy.bytes = num_elements((fetch ? dst : src).shape) * dtype_size(src.buffer->dtype);
      std::tie(copy.src_lo, copy.src_hi) = extent(src);
      std::tie(copy.dst_lo, copy.dst_hi) = extent(dst);
      frame.ctx.dma.start(std::move(copy));
      return;
    }
    case OpKind::BlockView: {
      std::vector<int64_t> starts;
      for (size_t i = 1; i < op.operands.size(); ++i) starts.push_back(as_int(in(i)));
      set(block_view(ref(in(0)), result_type().shape, starts, std::get<ir::BlockCopyAttr>(op.attr).name));
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
