#include "dsl/host_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "dsl/control.h"
#include "dsl/pallas_call.h"
#include "runtime/array_ops.h"
#include "runtime/block_ops.h"

namespace tessera {

int64_t detail::checked_axis(int64_t axis, int64_t rank, const char* api, SourceLoc loc) {
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    throw UserError(fmt::format("{}: axis {} is out of range", api, axis), fmt::format("an array of rank {}", rank),
                    fmt::format("use an axis in [0, {})", rank), loc);
  return axis;
}

namespace {

// The element-wise result of two arrays of one shape, in their promoted dtype.
Array elementwise(ir::OpKind kind, const Array& a, const Array& b, const char* op, SourceLoc loc) {
  for (const Array* x : {&a, &b})
    if (is_semaphore(x->dtype()))
      throw UserError(fmt::format("array {}: an array of semaphores holds counts, not numbers to compute with", op),
                      fmt::format("a {} {} array", shape_tuple_str(x->shape()), dtype_name(x->dtype())),
                      "pass it on to a pallas_call (pl::BlockSpec(pl::SEMAPHORE)); to compute with its counts, "
                      "convert them first: .astype(pl::i64)",
                      loc);
  if (a.shape() != b.shape())
    throw UserError(fmt::format("array {}: the shapes differ", op),
                    fmt::format("{} and {}", shape_tuple_str(a.shape()), shape_tuple_str(b.shape())),
                    "combine arrays of one shape", loc);
  const DType t = promote(a.dtype(), b.dtype());
  return rt::binary(kind, a.astype(t), b.astype(t));
}

// A block size for a dim of `n`: the largest power of two up to `cap` that divides it, else n.
int64_t block_for(int64_t n, int64_t cap) {
  for (int64_t b = cap; b >= 8; b /= 2)
    if (n % b == 0) return b;
  return n;
}

void bmm_kernel(Ref x, Ref y, Ref o, Ref acc) {
  when(program_id(3) == 0, [&] { acc() = zeros_like(acc); });
  acc() += dot(x(), y(), DType::f32);
  when(program_id(3) == num_programs(3) - 1, [&] { o() = acc().astype(o.dtype()); });
}

// (B, m, k) @ (B, k, n) as a compiled kernel: an f32 (f64) accumulator, blocks that divide the dims.
Array batched_matmul(const Array& a, const Array& b, DType out) {
  const int64_t B = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  const int64_t bm = block_for(m, 256), bk = block_for(k, 256), bn = block_for(n, 256);
  const DType acc = a.dtype() == DType::f64 || b.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const DType in = promote(a.dtype(), b.dtype());
  CallOptions options;
  options.name = "host_matmul";
  options.compiler_params.dimension_semantics = {parallel, parallel, parallel, arbitrary};
  auto call = pallas_call(
      bmm_kernel,
      GridSpec{.grid = {B, m / bm, n / bn, k / bk},
               .in_specs = {BlockSpec({squeezed, bm, bk}, [](Value h, Value i, Value, Value kk) { return idx(h, i, kk); }),
                            BlockSpec({squeezed, bk, bn}, [](Value h, Value, Value j, Value kk) { return idx(h, kk, j); })},
               .out_specs = {BlockSpec({squeezed, bm, bn}, [](Value h, Value i, Value j, Value) { return idx(h, i, j); })},
               .scratch_shapes = {VMEM({bm, bn}, acc)}},
      ShapeDtype({B, m, n}, out), options, std::source_location::current());
  return call(a.astype(in), b.astype(in));
}

std::vector<int64_t> iota_perm(size_t n) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

}  // namespace

Array concatenate(const std::vector<Array>& arrays, int64_t axis, std::source_location loc) {
  if (arrays.empty())
    throw UserError("pl::concatenate needs at least one array", "an empty list", "pass the arrays to join", loc);
  axis = detail::checked_axis(axis, arrays[0].rank(), "pl::concatenate", loc);
  for (const Array& x : arrays) {
    Shape s = x.shape(), f = arrays[0].shape();
    if (s.size() == f.size()) s[axis] = f[axis] = 0;
    if (s != f || x.dtype() != arrays[0].dtype())
      throw UserError("pl::concatenate: the arrays differ in rank, dtype or a dim other than the axis",
                      fmt::format("{} {} and {} {} along axis {}", shape_tuple_str(arrays[0].shape()),
                                  dtype_name(arrays[0].dtype()), shape_tuple_str(x.shape()), dtype_name(x.dtype()), axis),
                      "join arrays that agree everywhere but along the axis", loc);
  }
  return rt::concatenate(arrays, axis);
}

std::vector<Array> split(const Array& a, int64_t sections, int64_t axis, std::source_location loc) {
  axis = detail::checked_axis(axis, a.rank(), "pl::split", loc);
  if (sections < 1 || a.shape()[axis] % sections != 0)
    throw UserError(fmt::format("pl::split: dim {} of size {} does not split into {} equal parts", axis, a.shape()[axis],
                                sections),
                    shape_tuple_str(a.shape()), "split into a number of parts that divides the dim", loc);
  return rt::split(a, sections, axis);
}

Array transpose(const Array& a, std::vector<int64_t> perm, std::source_location loc) {
  if (perm.empty()) {
    perm = iota_perm(a.shape().size());
    std::reverse(perm.begin(), perm.end());
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != iota_perm(a.shape().size()))
    throw UserError("pl::transpose: perm must be a permutation of the dims", fmt::format("({})", fmt::join(perm, ", ")),
                    fmt::format("list every dim of the rank-{} array once", a.rank()), loc);
  return rt::transpose(a, perm);
}

Array dynamic_slice(const Array& a, const std::vector<int64_t>& starts, const Shape& sizes, std::source_location loc) {
  if (starts.size() != a.shape().size() || sizes.size() != a.shape().size())
    throw UserError("pl::dynamic_slice needs one start and one size per dim",
                    fmt::format("{} start(s), {} size(s) for shape {}", starts.size(), sizes.size(), shape_tuple_str(a.shape())),
                    "give one of each per dim", loc);
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] < 0 || sizes[d] > a.shape()[d])
      throw UserError("pl::dynamic_slice: a slice size is larger than its dim",
                      fmt::format("size {} for dim {} of {}", sizes[d], d, shape_tuple_str(a.shape())),
                      "slice at most the whole dim", loc);
  return rt::slice(a, starts, sizes);
}

Array dynamic_slice_in_dim(const Array& a, int64_t start, int64_t size, int64_t axis, std::source_location loc) {
  axis = detail::checked_axis(axis, a.rank(), "pl::dynamic_slice_in_dim", loc);
  std::vector<int64_t> starts(a.shape().size(), 0);
  Shape sizes = a.shape();
  starts[axis] = start;
  sizes[axis] = size;
  return dynamic_slice(a, starts, sizes, loc);
}

Array dynamic_update_slice(const Array& a, const Array& update, const std::vector<int64_t>& starts, std::source_location loc) {
  if (starts.size() != a.shape().size() || update.shape().size() != a.shape().size())
    throw UserError("pl::dynamic_update_slice: the update and starts must have the array's rank",
                    fmt::format("an update of {} at {} start(s) into {}", shape_tuple_str(update.shape()), starts.size(),
                                shape_tuple_str(a.shape())),
                    "give an update of the same rank and one start per dim", loc);
  for (size_t d = 0; d < starts.size(); ++d)
    if (update.shape()[d] > a.shape()[d])
      throw UserError("pl::dynamic_update_slice: the update is larger than the array",
                      fmt::format("{} into {}", shape_tuple_str(update.shape()), shape_tuple_str(a.shape())),
                      "update a window that fits", loc);
  return rt::update_slice(a, update, starts);
}

Array dynamic_update_slice_in_dim(const Array& a, const Array& update, int64_t start, int64_t axis, std::source_location loc) {
  axis = detail::checked_axis(axis, a.rank(), "pl::dynamic_update_slice_in_dim", loc);
  std::vector<int64_t> starts(a.shape().size(), 0);
  starts[axis] = start;
  return dynamic_update_slice(a, update, starts, loc);
}

Array dynamic_update_index_in_dim(const Array& a, const Array& update, int64_t index, int64_t axis,
                                  std::source_location loc) {
  axis = detail::checked_axis(axis, a.rank(), "pl::dynamic_update_index_in_dim", loc);
  if (update.rank() != a.rank() || update.shape()[axis] != 1)
    throw UserError("pl::dynamic_update_index_in_dim: the update must have the array's rank and size 1 along the axis",
                    fmt::format("an update of {} into {} along axis {}", shape_tuple_str(update.shape()),
                                shape_tuple_str(a.shape()), axis),
                    "slice the update with a size-1 window along the axis", loc);
  return dynamic_update_slice_in_dim(a, update, index, axis, loc);
}

Array matmul(const Array& a, const Array& b, std::optional<DType> preferred, std::source_location loc) {
  const bool batched = a.rank() == 3 && b.rank() == 3 && a.shape()[0] == b.shape()[0];
  if (!((a.rank() == 2 && b.rank() == 2) || batched) || a.shape()[a.rank() - 1] != b.shape()[b.rank() - 2])
    throw UserError("pl::matmul: the operands do not multiply",
                    fmt::format("{} @ {}", shape_tuple_str(a.shape()), shape_tuple_str(b.shape())),
                    "multiply (m, k) by (k, n), or (b, m, k) by (b, k, n)", loc);
  const DType out = preferred.value_or(promote(a.dtype(), b.dtype()));
  if (batched) return batched_matmul(a, b, out);
  return batched_matmul(a.reshape({1, a.shape()[0], a.shape()[1]}), b.reshape({1, b.shape()[0], b.shape()[1]}), out)
      .reshape({a.shape()[0], b.shape()[1]});
}

Array dot(const Array& a, const Array& b, std::optional<DType> preferred, std::source_location loc) {
  return matmul(a, b, preferred, loc);
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b, std::optional<DType> preferred,
             std::source_location loc) {
  const auto comma = subscripts.find(','), arrow = subscripts.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    throw UserError("pl::einsum needs two operands and an explicit output", fmt::format("\"{}\"", subscripts),
                    "write it as \"ij,jk->ik\"", loc);
  const std::string la = subscripts.substr(0, comma), lb = subscripts.substr(comma + 1, arrow - comma - 1),
                    lo = subscripts.substr(arrow + 2);
  if (la.size() != a.shape().size() || lb.size() != b.shape().size())
    throw UserError("pl::einsum: the subscripts do not match the operands' ranks",
                    fmt::format("\"{}\" for {} and {}", subscripts, shape_tuple_str(a.shape()), shape_tuple_str(b.shape())),
                    "give one letter per dim of each operand", loc);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < la.size(); ++i) size[la[i]] = a.shape()[i];
  for (size_t i = 0; i < lb.size(); ++i)
    if (auto [it, fresh] = size.emplace(lb[i], b.shape()[i]); !fresh && it->second != b.shape()[i])
      throw UserError(fmt::format("pl::einsum: letter `{}` has two sizes", lb[i]),
                      fmt::format("{} and {}", it->second, b.shape()[i]), "use letters consistently", loc);
  for (char c : lo)
    if (!size.count(c))
      throw UserError(fmt::format("pl::einsum: output letter `{}` is in no operand", c), fmt::format("\"{}\"", subscripts),
                      "build the output from the operands' letters", loc);
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  std::string batch, contract, free_a, free_b;
  for (char c : la) {
    if (in(lb, c) && in(lo, c)) batch += c;
    else if (in(lb, c)) contract += c;
    else if (in(lo, c)) free_a += c;
  }
  for (char c : lb)
    if (!in(la, c) && in(lo, c)) free_b += c;
  // Letters in one operand only and not in the output are summed out first.
  auto reduce_only = [&](Array x, const std::string& letters, const std::string& other, std::string& kept) {
    std::vector<int64_t> axes;
    kept.clear();
    for (size_t i = 0; i < letters.size(); ++i) {
      if (!in(other, letters[i]) && !in(lo, letters[i])) axes.push_back(static_cast<int64_t>(i));
      else kept += letters[i];
    }
    return axes.empty() ? x : rt::reduce(ir::OpKind::ReduceSum, x, axes);
  };
  std::string ka, kb;
  Array ra = reduce_only(a, la, lb, ka), rb = reduce_only(b, lb, la, kb);
  // Arrange as (batch, free, contract) and (batch, contract, free), multiply, then order the output.
  auto arrange = [&](const Array& x, const std::string& letters, const std::string& order) {
    std::vector<int64_t> perm;
    for (char c : order) perm.push_back(static_cast<int64_t>(letters.find(c)));
    return rt::transpose(x, perm);
  };
  auto product = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size[c];
    return p;
  };
  const int64_t B = product(batch), M = product(free_a), K = product(contract), N = product(free_b);
  Array xa = arrange(ra, ka, batch + free_a + contract).reshape({B, M, K});
  Array xb = arrange(rb, kb, batch + contract + free_b).reshape({B, K, N});
  const DType out = preferred.value_or(promote(a.dtype(), b.dtype()));
  Array c = batched_matmul(xa, xb, out);
  const std::string have = batch + free_a + free_b;
  Shape shape;
  for (char ch : have) shape.push_back(size[ch]);
  return arrange(c.reshape(shape), have, lo);
}

Array operator+(const Array& a, const detail::LocatedArray& b) {
  return elementwise(ir::OpKind::Add, a, b.array, "+", b.loc);
}
Array operator-(const Array& a, const detail::LocatedArray& b) {
  return elementwise(ir::OpKind::Sub, a, b.array, "-", b.loc);
}
Array operator*(const Array& a, const detail::LocatedArray& b) {
  return elementwise(ir::OpKind::Mul, a, b.array, "*", b.loc);
}
Array& operator+=(Array& a, const detail::LocatedArray& b) {
  return a = elementwise(ir::OpKind::Add, a, b.array, "+=", b.loc);
}

}  // namespace tessera
