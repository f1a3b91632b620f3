// A kernel built directly with the IR builder that uses every op kind in a valid way, for printer
// and verifier tests.
#pragma once

#include "jit/ir/builder.h"

namespace tessera::testing {

inline ir::Function kernel_with_every_op() {
  using namespace ir;
  Function fn;
  Builder b(fn, "every_op");
  auto s = [](DType t) { return Type::scalar(t); };
  auto blk = [](DType t, Shape sh) { return Type::tensor(t, std::move(sh)); };
  ValueId x = b.add_param(Type::ref(DType::f32, {16, 8}, MemorySpace::ANY), "input 0");
  ValueId o = b.add_param(Type::ref(DType::f32, {16, 8}, MemorySpace::ANY), "output 0");
  ValueId lo = b.add_param(s(DType::index), "first step");
  ValueId hi = b.add_param(s(DType::index), "end step");
  ValueId scratch = b.create_value(OpKind::Alloc, {}, Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM), std::string("scratch 0"), {});

  PipelineAttr pa;
  pa.grid = {2};
  pa.semantics = {DimSemantics::Parallel};
  pa.operands = {PipelineOperand{"input 0", true, {8, 8}, {false, false}, MemorySpace::VMEM, false, false},
                 PipelineOperand{"output 0", true, {8, 8}, {false, false}, MemorySpace::VMEM, true, false}};
  std::vector<RegionId> regions;
  for (int k = 0; k < 2; ++k) {
    RegionId map = b.create_region({s(DType::i32)});
    Builder::RegionScope scope(b, map);
    // An index map yields i64 block indices.
    ValueId i = b.create_value(OpKind::Cast, {fn.regions[map].args[0]}, s(DType::i64), {}, {});
    ValueId zero = b.create_value(OpKind::Constant, {}, s(DType::i64), Literal::of_int(0), {});
    b.create(OpKind::Yield, {i, zero}, {}, {}, {});
    regions.push_back(map);
  }
  RegionId body = b.create_region({Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM), Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM)});
  {
    Builder::RegionScope scope(b, body);
    ValueId xb = fn.regions[body].args[0], ob = fn.regions[body].args[1];
    ValueId pid = b.create_value(OpKind::ProgramId, {}, s(DType::i32), int64_t{0}, {});
    ValueId np = b.create_value(OpKind::NumPrograms, {}, s(DType::i32), int64_t{0}, {});
    ValueId v = b.create_value(OpKind::Load, {xb}, blk(DType::f32, {8, 8}), {}, {});
    for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Rem, OpKind::Pow, OpKind::Max, OpKind::Min})
      v = b.create_value(k, {v, v}, blk(DType::f32, {8, 8}), {}, {});
    for (OpKind k : {OpKind::Neg, OpKind::Abs, OpKind::Exp, OpKind::Log, OpKind::Tanh, OpKind::Sqrt, OpKind::Rsqrt,
                     OpKind::Logistic, OpKind::Sin, OpKind::Cos, OpKind::Erf, OpKind::Erfc, OpKind::Floor, OpKind::Ceil})
      v = b.create_value(k, {v}, blk(DType::f32, {8, 8}), {}, {});
    ValueId iv = b.create_value(OpKind::Iota, {}, blk(DType::i32, {8, 8}), int64_t{1}, {});
    for (OpKind k : {OpKind::And, OpKind::Or, OpKind::Xor}) iv = b.create_value(k, {iv, iv}, blk(DType::i32, {8, 8}), {}, {});
    iv = b.create_value(OpKind::Not, {iv}, blk(DType::i32, {8, 8}), {}, {});
    ValueId mask = b.create_value(OpKind::Lt, {iv, iv}, blk(DType::i1, {8, 8}), {}, {});
    for (OpKind k : {OpKind::Eq, OpKind::Ne, OpKind::Le, OpKind::Gt, OpKind::Ge})
      mask = b.create_value(OpKind::And, {mask, b.create_value(k, {iv, iv}, blk(DType::i1, {8, 8}), {}, {})},
                            blk(DType::i1, {8, 8}), {}, {});
    ValueId f = b.create_value(OpKind::Cast, {iv}, blk(DType::f32, {8, 8}), {}, {});
    v = b.create_value(OpKind::Select, {mask, v, f}, blk(DType::f32, {8, 8}), {}, {});
    ValueId t = b.create_value(OpKind::Transpose, {v}, blk(DType::f32, {8, 8}), std::vector<int64_t>{1, 0}, {});
    ValueId d = b.create_value(OpKind::DotGeneral, {v, t}, blk(DType::f32, {8, 8}), DotAttr{{1}, {0}, {}, {}}, {});
    ValueId r = b.create_value(OpKind::ReduceSum, {d}, blk(DType::f32, {8}), std::vector<int64_t>{1}, {});
    ValueId rmax = b.create_value(OpKind::ReduceMax, {d}, blk(DType::f32, {8}), std::vector<int64_t>{0}, {});
    ValueId rmin = b.create_value(OpKind::ReduceMin, {r}, s(DType::f32), std::vector<int64_t>{0}, {});
    ValueId bc = b.create_value(OpKind::BroadcastTo, {rmax}, blk(DType::f32, {8, 8}), {}, {});
    ValueId rs = b.create_value(OpKind::Reshape, {bc}, blk(DType::f32, {64}), {}, {});
    (void)rs;
    // A window of the scratch: row pid (squeezed), columns 0, 2, 4, 6.
    ValueId zero = b.create_value(OpKind::Constant, {}, s(DType::i32), Literal::of_int(0), {});
    // The same window of a value: row pid of bc, columns 0, 2, 4, 6.
    ValueId sl = b.create_value(OpKind::Slice, {bc, pid, zero}, blk(DType::f32, {4}),
                                ViewAttr{{ViewDim{true, 1, 1}, ViewDim{false, 4, 2}}}, {});
    (void)sl;
    ValueId cat = b.create_value(OpKind::Concatenate, {rs, rs}, blk(DType::f32, {128}), int64_t{0}, {});
    (void)cat;
    ValueId bits = b.create_value(OpKind::Bitcast, {rs}, blk(DType::i32, {64}), {}, {});
    // Bitcasts between widths: each f32 as its four bytes, and those bytes as two u16 halves.
    ValueId bytes = b.create_value(OpKind::Bitcast, {rs}, blk(DType::u8, {64, 4}), {}, {});
    ValueId pairs = b.create_value(OpKind::Reshape, {bytes}, blk(DType::u8, {64, 2, 2}), {}, {});
    ValueId halves = b.create_value(OpKind::Bitcast, {pairs}, blk(DType::u16, {64, 2}), {}, {});
    (void)halves;
    ValueId aligned = b.create_value(OpKind::MultipleOf, {pid}, s(DType::i32), int64_t{8}, {});
    (void)bits;
    (void)aligned;
    ValueId win = b.create_value(OpKind::View, {scratch, pid, zero}, Type::ref(DType::f32, {4}, MemorySpace::VMEM),
                                 ViewAttr{{ViewDim{true, 1, 1}, ViewDim{false, 4, 2}}}, {});
    ValueId wmask = b.create_value(OpKind::Constant, {}, blk(DType::i1, {4}), Literal::of_int(1), {});
    ValueId other = b.create_value(OpKind::Constant, {}, blk(DType::f32, {4}), Literal::of_float(0.5), {});
    ValueId w = b.create_value(OpKind::Load, {win, wmask, other}, blk(DType::f32, {4}), {}, {});
    b.create(OpKind::Store, {win, w, wmask}, {}, {}, {});
    b.create(OpKind::Store, {ob, d}, {}, {}, {});
    b.create(OpKind::DotAccumulate, {ob, v, t}, {}, DotAttr{{1}, {0}, {}, {}}, {});
    // if with results and an else branch
    ValueId c = b.create_value(OpKind::Eq, {pid, np}, s(DType::i1), {}, {});
    RegionId then_r = b.create_region({}), else_r = b.create_region({});
    {
      Builder::RegionScope sc(b, then_r);
      b.create(OpKind::Yield, {rmin}, {}, {}, {});
    }
    {
      Builder::RegionScope sc(b, else_r);
      ValueId one = b.create_value(OpKind::Constant, {}, s(DType::f32), Literal::of_float(1.0), {});
      b.create(OpKind::Yield, {one}, {}, {}, {});
    }
    OpId iff = b.create(OpKind::If, {c}, {s(DType::f32)}, {}, {}, {then_r, else_r});
    // for with one carried value
    RegionId loop = b.create_region({s(DType::i32), s(DType::f32)});
    {
      Builder::RegionScope sc(b, loop);
      ValueId acc = fn.regions[loop].args[1];
      ValueId next = b.create_value(OpKind::Add, {acc, acc}, s(DType::f32), {}, {});
      b.create(OpKind::Yield, {next}, {}, {}, {});
    }
    ValueId four = b.create_value(OpKind::Constant, {}, s(DType::i32), Literal::of_int(4), {});
    ValueId one = b.create_value(OpKind::Constant, {}, s(DType::i32), Literal::of_int(1), {});
    OpId fr = b.create(OpKind::For, {zero, four, one, fn.ops[iff].results[0]}, {s(DType::f32)}, {}, {}, {loop});
    // while with one carried value: doubles the sum until it reaches 100
    RegionId wcond = b.create_region({s(DType::f32)});
    {
      Builder::RegionScope sc(b, wcond);
      ValueId hundred = b.create_value(OpKind::Constant, {}, s(DType::f32), Literal::of_float(100.0), {});
      ValueId more = b.create_value(OpKind::Lt, {fn.regions[wcond].args[0], hundred}, s(DType::i1), {}, {});
      b.create(OpKind::Yield, {more}, {}, {}, {});
    }
    RegionId wbody = b.create_region({s(DType::f32)});
    {
      Builder::RegionScope sc(b, wbody);
      ValueId v = fn.regions[wbody].args[0];
      b.create(OpKind::Yield, {b.create_value(OpKind::Add, {v, v}, s(DType::f32), {}, {})}, {}, {}, {});
    }
    OpId wh = b.create(OpKind::While, {fn.ops[fr].results[0]}, {s(DType::f32)}, {}, {}, {wcond, wbody});
    b.create(OpKind::TraceStart, {}, {}, std::string("report"), {});
    b.create(OpKind::DebugPrint, {fn.ops[wh].results[0], pid}, {}, std::string("sum {} at {}"), {});
    b.create(OpKind::TraceStop, {}, {}, std::string("report"), {});
  }
  regions.push_back(body);
  b.create(OpKind::Pipeline, {lo, hi, x, o}, {}, pa, {}, regions);
  // The lowered forms of a pipeline's pieces.
  ValueId buf = b.create_value(OpKind::Alloc, {}, Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM), std::string("input 0 block"), {});
  ValueId z = b.create_value(OpKind::Constant, {}, s(DType::i32), Literal::of_int(0), {});
  b.create(OpKind::GridPoint, {z}, {}, int64_t{0}, {});
  b.create(OpKind::FetchBlock, {x, buf, z, z}, {}, BlockCopyAttr{"input 0", 0, false}, {});
  b.create_value(OpKind::BlockView, {x, z, z}, Type::ref(DType::f32, {8, 8}, MemorySpace::VMEM),
                 BlockCopyAttr{"input 0", 0, false}, {});
  b.create(OpKind::WritebackBlock, {buf, o, z, z}, {}, BlockCopyAttr{"output 0", 1, true}, {});
  // A nested pipeline's pieces: its begin, a step, an asynchronous block copy and its wait.
  ValueId dsems = b.create_value(OpKind::Alloc, {}, Type::ref(DType::dma_sem, {2}, MemorySpace::SEMAPHORE),
                                 std::string("copies"), {});
  ValueId dsem = b.create_value(OpKind::View, {dsems, z}, Type::ref(DType::dma_sem, {}, MemorySpace::SEMAPHORE),
                                ViewAttr{{ViewDim{true, 1, 1}}}, {});
  ValueId steps = b.create_value(OpKind::Constant, {}, s(DType::index), Literal::of_int(4), {});
  b.create(OpKind::CheckGrid, {steps, steps}, {}, std::string("pl::emit_pipeline"), {});
  b.create(OpKind::PipelineBegin, {}, {}, int64_t{1}, {});
  b.create(OpKind::GridPoint, {z, z}, {}, int64_t{1}, {});
  b.create(OpKind::FetchBlock, {x, buf, z, z, dsem}, {}, BlockCopyAttr{"input 0", 0, false, 1}, {});
  b.create(OpKind::DmaWait, {dsem}, {}, int64_t{256}, {});
  // run_scoped with a semaphore, a copy and semaphore traffic.
  RegionId scope = b.create_region({});
  {
    Builder::RegionScope sc(b, scope);
    ValueId sem = b.create_value(OpKind::Alloc, {}, Type::ref(DType::sem, {}, MemorySpace::SEMAPHORE), std::string("sem"), {});
    ValueId one = b.create_value(OpKind::Constant, {}, s(DType::i32), Literal::of_int(1), {});
    b.create(OpKind::DmaStart, {x, o, dsem}, {}, {}, {});
    b.create(OpKind::DmaWait, {dsem}, {}, int64_t{512}, {});
    b.create(OpKind::SemaphoreSignal, {sem, one}, {}, {}, {});
    ValueId count = b.create_value(OpKind::SemaphoreRead, {sem}, s(DType::i32), {}, {});
    b.create(OpKind::SemaphoreWait, {sem, count}, {}, {}, {});
    // Talking to another device: its coordinate here, a remote copy and a remote signal.
    ValueId xi = b.create_value(OpKind::AxisIndex, {}, s(DType::i32), int64_t{0}, {});
    b.create(OpKind::RemoteDmaStart, {x, o, dsem, dsem, xi, one}, {}, DeviceAttr{false}, {});
    b.create(OpKind::RemoteSemaphoreSignal, {sem, one, xi}, {}, DeviceAttr{true}, {});
    b.create(OpKind::Yield, {count}, {}, {}, {});
  }
  b.create(OpKind::Scope, {}, {s(DType::i32)}, {}, {}, {scope});
  return fn;
}

}  // namespace tessera::testing
