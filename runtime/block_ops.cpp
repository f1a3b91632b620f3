#include "runtime/block_ops.h"

#include <cstring>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "runtime/element_rules.h"

namespace tessera::rt {

using ir::OpKind;

namespace {

// The element rules (runtime/element_rules.h), overloaded on the compute type so one lambda serves
// every dtype.
using rules::wrap_add;
using rules::wrap_mul;
using rules::wrap_sub;
template <class C> C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return rules::float_max(a, b);
  else return rules::int_max(a, b);
}
template <class C> C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return rules::float_min(a, b);
  else return rules::int_min(a, b);
}

// Applies f to every element in the compute type and stores the result rounded into storage type R.
template <class T, class R, class F>
Array map1(const Array& a, DType out, F f) {
  Array r(out, a.shape());
  const T* x = a.data_as<T>();
  R* y = r.mutable_data_as<R>();
  const int64_t n = a.size();
  for (int64_t i = 0; i < n; ++i) y[i] = f(widen(x[i]));
  return r;
}
template <class T, class R, class F>
Array map2(const Array& a, const Array& b, DType out, F f) {
  Array r(out, a.shape());
  const T* x = a.data_as<T>();
  const T* y = b.data_as<T>();
  R* z = r.mutable_data_as<R>();
  const int64_t n = a.size();
  for (int64_t i = 0; i < n; ++i) z[i] = f(widen(x[i]), widen(y[i]));
  return r;
}

}  // namespace

int64_t int_pow_wrapped(int64_t base, int64_t exp, int bits) {
  switch (bits) {
    case 8: return rules::int_pow<int8_t>(static_cast<int8_t>(base), static_cast<int8_t>(exp));
    case 16: return rules::int_pow<int16_t>(static_cast<int16_t>(base), static_cast<int16_t>(exp));
    case 32: return rules::int_pow<int32_t>(static_cast<int32_t>(base), static_cast<int32_t>(exp));
    case 64: return rules::int_pow<int64_t>(base, exp);
    // The unsigned types: a u64 exponent of 2^63 or more is not the negative i64 it reads as.
    case -8: return rules::int_pow<uint8_t>(static_cast<uint8_t>(base), static_cast<uint8_t>(exp));
    case -16: return rules::int_pow<uint16_t>(static_cast<uint16_t>(base), static_cast<uint16_t>(exp));
    case -32: return rules::int_pow<uint32_t>(static_cast<uint32_t>(base), static_cast<uint32_t>(exp));
    default:
      return static_cast<int64_t>(rules::int_pow<uint64_t>(static_cast<uint64_t>(base), static_cast<uint64_t>(exp)));
  }
}

Array splat(const ir::Literal& value, DType dtype, const Shape& shape) {
  Array r(dtype, shape);
  dispatch_dtype(dtype, [&]<class T>() {
    T v;
    if constexpr (is_float_storage_v<T>) v = from_double<T>(value.as_double());
    else if (value.is_float) v = from_double<T>(value.f);
    else if constexpr (std::is_same_v<T, bool>) v = value.i != 0;
    else v = static_cast<T>(value.i);
    T* p = r.mutable_data_as<T>();
    std::fill(p, p + r.size(), v);
  });
  return r;
}

Array unary(OpKind kind, const Array& a) {
  return dispatch_dtype(a.dtype(), [&]<class T>() -> Array {
    using C = compute_t<T>;
    const DType d = a.dtype();
    auto to = [](C v) { return narrow<T>(v); };
    if constexpr (std::is_same_v<T, bool>) {
      if (kind == OpKind::Not) return map1<T, T>(a, d, [](bool v) { return !v; });
    } else if constexpr (std::is_integral_v<T>) {
      switch (kind) {
        case OpKind::Neg: return map1<T, T>(a, d, [](T v) { return rules::int_neg(v); });
        case OpKind::Abs: return map1<T, T>(a, d, [](T v) { return rules::int_abs(v); });
        case OpKind::Not: return map1<T, T>(a, d, [](T v) { return static_cast<T>(~v); });
        default: break;
      }
    } else {
      switch (kind) {
        case OpKind::Neg: return map1<T, T>(a, d, [&](C v) { return to(-v); });
        case OpKind::Abs: return map1<T, T>(a, d, [&](C v) { return to(std::abs(v)); });
        case OpKind::Exp: return map1<T, T>(a, d, [&](C v) { return to(rules::float_exp(v)); });
        case OpKind::Log: return map1<T, T>(a, d, [&](C v) { return to(rules::float_log(v)); });
        case OpKind::Tanh: return map1<T, T>(a, d, [&](C v) { return to(rules::float_tanh(v)); });
        case OpKind::Sqrt: return map1<T, T>(a, d, [&](C v) { return to(std::sqrt(v)); });
        case OpKind::Rsqrt: return map1<T, T>(a, d, [&](C v) { return to(C(1) / std::sqrt(v)); });
        case OpKind::Logistic: return map1<T, T>(a, d, [&](C v) { return to(rules::float_logistic(v)); });
        case OpKind::Sin: return map1<T, T>(a, d, [&](C v) { return to(rules::float_sin(v)); });
        case OpKind::Cos: return map1<T, T>(a, d, [&](C v) { return to(rules::float_cos(v)); });
        case OpKind::Erf: return map1<T, T>(a, d, [&](C v) { return to(rules::float_erf(v)); });
        case OpKind::Erfc: return map1<T, T>(a, d, [&](C v) { return to(rules::float_erfc(v)); });
        case OpKind::Floor: return map1<T, T>(a, d, [&](C v) { return to(std::floor(v)); });
        case OpKind::Ceil: return map1<T, T>(a, d, [&](C v) { return to(std::ceil(v)); });
        default: break;
      }
    }
    throw InternalError("block_ops", fmt::format("no unary `{}` for {}", ir::mnemonic(kind), dtype_name(d)));
  });
}

Array binary(OpKind kind, const Array& a, const Array& b) {
  return dispatch_dtype(a.dtype(), [&]<class T>() -> Array {
    using C = compute_t<T>;
    const DType d = a.dtype();
    auto to = [](C v) { return narrow<T>(v); };
    switch (kind) {
      case OpKind::Eq: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x == y; });
      case OpKind::Ne: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x != y; });
      case OpKind::Lt: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x < y; });
      case OpKind::Le: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x <= y; });
      case OpKind::Gt: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x > y; });
      case OpKind::Ge: return map2<T, bool>(a, b, DType::i1, [](C x, C y) { return x >= y; });
      default: break;
    }
    if constexpr (std::is_same_v<T, bool>) {
      switch (kind) {
        case OpKind::And: return map2<T, T>(a, b, d, [](bool x, bool y) { return x && y; });
        case OpKind::Or: return map2<T, T>(a, b, d, [](bool x, bool y) { return x || y; });
        case OpKind::Xor: return map2<T, T>(a, b, d, [](bool x, bool y) { return x != y; });
        default: break;
      }
    } else if constexpr (std::is_integral_v<T>) {
      switch (kind) {
        case OpKind::Add: return map2<T, T>(a, b, d, [](T x, T y) { return wrap_add(x, y); });
        case OpKind::Sub: return map2<T, T>(a, b, d, [](T x, T y) { return wrap_sub(x, y); });
        case OpKind::Mul: return map2<T, T>(a, b, d, [](T x, T y) { return wrap_mul(x, y); });
        case OpKind::Div: return map2<T, T>(a, b, d, [](T x, T y) { return rules::int_div(x, y); });
        case OpKind::Rem: return map2<T, T>(a, b, d, [](T x, T y) { return rules::int_rem(x, y); });
        case OpKind::Pow: return map2<T, T>(a, b, d, [](T x, T y) { return rules::int_pow(x, y); });
        case OpKind::Max: return map2<T, T>(a, b, d, [](T x, T y) { return rules::int_max(x, y); });
        case OpKind::Min: return map2<T, T>(a, b, d, [](T x, T y) { return rules::int_min(x, y); });
        case OpKind::And: return map2<T, T>(a, b, d, [](T x, T y) { return static_cast<T>(x & y); });
        case OpKind::Or: return map2<T, T>(a, b, d, [](T x, T y) { return static_cast<T>(x | y); });
        case OpKind::Xor: return map2<T, T>(a, b, d, [](T x, T y) { return static_cast<T>(x ^ y); });
        default: break;
      }
    } else {
      switch (kind) {
        case OpKind::Add: return map2<T, T>(a, b, d, [&](C x, C y) { return to(x + y); });
        case OpKind::Sub: return map2<T, T>(a, b, d, [&](C x, C y) { return to(x - y); });
        case OpKind::Mul: return map2<T, T>(a, b, d, [&](C x, C y) { return to(x * y); });
        case OpKind::Div: return map2<T, T>(a, b, d, [&](C x, C y) { return to(x / y); });
        case OpKind::Rem: return map2<T, T>(a, b, d, [&](C x, C y) { return to(rules::float_rem(x, y)); });
        case OpKind::Pow: return map2<T, T>(a, b, d, [&](C x, C y) { return to(rules::float_pow(x, y)); });
        case OpKind::Max: return map2<T, T>(a, b, d, [&](C x, C y) { return to(rules::float_max(x, y)); });
        case OpKind::Min: return map2<T, T>(a, b, d, [&](C x, C y) { return to(rules::float_min(x, y)); });
        default: break;
      }
    }
    throw InternalError("block_ops", fmt::format("no binary `{}` for {}", ir::mnemonic(kind), dtype_name(d)));
  });
}

Array select(const Array& cond, const Array& on_true, const Array& on_false) {
  Array r(on_true.dtype(), on_true.shape());
  const bool* c = cond.data_as<bool>();
  dispatch_dtype(on_true.dtype(), [&]<class T>() {
    const T* t = on_true.data_as<T>();
    const T* f = on_false.data_as<T>();
    T* out = r.mutable_data_as<T>();
    for (int64_t i = 0; i < r.size(); ++i) out[i] = c[i] ? t[i] : f[i];
  });
  return r;
}

// Row-major strides (in elements) of a shape.
static std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

Array iota(DType dtype, const Shape& shape, int64_t axis) {
  Array r(dtype, shape);
  std::vector<int64_t> st = strides_of(shape);
  dispatch_dtype(dtype, [&]<class T>() {
    T* p = r.mutable_data_as<T>();
    for (int64_t i = 0; i < r.size(); ++i) p[i] = from_double<T>(static_cast<double>((i / st[axis]) % shape[axis]));
  });
  return r;
}

// Gathers a.data at the positions of an odometer over `shape` with per-dim source strides (0 for
// broadcast dims); the innermost dim is a contiguous copy or a fill when possible.
static Array gather(const Array& a, const Shape& shape, const std::vector<int64_t>& src_strides) {
  Array r(a.dtype(), shape);
  if (r.size() == 0) return r;
  const int64_t es = dtype_size(a.dtype());
  const std::byte* src = a.data();
  std::byte* dst = r.mutable_data();
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, static_cast<size_t>(es));
    return r;
  }
  const int64_t inner = shape[rank - 1];
  const int64_t inner_stride = src_strides[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t rows = r.size() / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < rank; ++d) off += idx[d] * src_strides[d];
    std::byte* out = dst + row * inner * es;
    if (inner_stride == 1) {
      std::memcpy(out, src + off * es, static_cast<size_t>(inner * es));
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(out + i * es, src + (off + i * inner_stride) * es, static_cast<size_t>(es));
    }
    for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

Array broadcast_to(const Array& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  std::vector<int64_t> ast = strides_of(a.shape());
  std::vector<int64_t> st(shape.size(), 0);
  const size_t offset = shape.size() - a.shape().size();
  for (size_t d = 0; d < a.shape().size(); ++d) st[offset + d] = a.shape()[d] == 1 ? 0 : ast[d];
  return gather(a, shape, st);
}

Array transpose(const Array& a, const std::vector<int64_t>& perm) {
  std::vector<int64_t> ast = strides_of(a.shape());
  Shape s;
  std::vector<int64_t> st;
  for (int64_t p : perm) {
    s.push_back(a.shape()[p]);
    st.push_back(ast[p]);
  }
  return gather(a, s, st);
}

Array reduce(OpKind kind, const Array& a, const std::vector<int64_t>& axes) {
  // Move the reduced axes last (in order), then reduce contiguous runs in index order.
  std::vector<int64_t> perm, kept_shape;
  int64_t run = 1;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      perm.push_back(d);
      kept_shape.push_back(a.shape()[d]);
    }
  std::vector<int64_t> sorted_axes = axes;
  std::sort(sorted_axes.begin(), sorted_axes.end());
  for (int64_t d : sorted_axes) {
    perm.push_back(d);
    run *= a.shape()[d];
  }
  Array moved = transpose(a, perm);
  Array r(a.dtype(), kept_shape);
  dispatch_dtype(a.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    // Floats accumulate in at least f32, integers in their own type (wrapping).
    const T* x = moved.data_as<T>();
    T* y = r.mutable_data_as<T>();
    for (int64_t o = 0; o < r.size(); ++o) {
      const T* p = x + o * run;
      C acc;
      if (kind == OpKind::ReduceSum) {
        acc = C(0);
        for (int64_t i = 0; i < run; ++i) {
          if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) acc = wrap_add(acc, widen(p[i]));
          else acc = static_cast<C>(acc + widen(p[i]));
        }
      } else {
        const bool is_max = kind == OpKind::ReduceMax;
        if constexpr (std::is_floating_point_v<C>)
          acc = is_max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
        else
          acc = is_max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
        for (int64_t i = 0; i < run; ++i) acc = is_max ? nan_max(acc, widen(p[i])) : nan_min(acc, widen(p[i]));
      }
      y[o] = narrow<T>(acc);
    }
  });
  return r;
}

namespace {

// dot_general on operands already arranged as lhs [B, M, K] and rhs [B, K, N], in accumulator
// type A. Each output element sums its products in k order.
template <class A>
void batched_matmul(const A* lhs, const A* rhs, A* out, int64_t B, int64_t M, int64_t K, int64_t N) {
  for (int64_t b = 0; b < B; ++b) {
    const A* l = lhs + b * M * K;
    const A* r = rhs + b * K * N;
    A* o = out + b * M * N;
    // A strip of up to kStrip outputs of one row stays in a local accumulator (registers) over the
    // whole k loop, so the inner loop only loads: summing straight into the output row stores every
    // element once per k, which bounds the loop by store throughput and 4 KiB aliasing with `rhs`.
    constexpr int64_t kStrip = 32;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n0 = 0; n0 < N; n0 += kStrip) {
        const int64_t width = std::min(kStrip, N - n0);
        A acc[kStrip] = {};
        auto strip = [&](auto w) {  // w: the strip's width, a compile-time constant for full strips
          for (int64_t k = 0; k < K; ++k) {
            const A lv = l[m * K + k];
            const A* rrow = r + k * N + n0;
            if constexpr (std::is_integral_v<A>) {
              for (int64_t n = 0; n < w; ++n) acc[n] = wrap_add(acc[n], wrap_mul(lv, rrow[n]));
            } else {
              for (int64_t n = 0; n < w; ++n) acc[n] += lv * rrow[n];
            }
          }
        };
        if (width == kStrip) strip(std::integral_constant<int64_t, kStrip>());
        else strip(width);
        std::copy(acc, acc + width, o + m * N + n0);
      }
    }
  }
}

DType accumulator_dtype(DType a, DType b) {
  if (is_float(a) || is_float(b)) return (a == DType::f64 || b == DType::f64) ? DType::f64 : DType::f32;
  return (dtype_size(a) == 8 || dtype_size(b) == 8) ? DType::i64 : DType::i32;
}

}  // namespace

Array dot_general(const Array& lhs, const Array& rhs, const ir::DotAttr& dims, DType result_dtype) {
  auto arrange = [](const Array& x, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract,
                    bool contract_last, int64_t& B, int64_t& F, int64_t& K) {
    std::vector<int64_t> free;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
          std::find(contract.begin(), contract.end(), d) == contract.end())
        free.push_back(d);
    std::vector<int64_t> perm = batch;
    B = F = K = 1;
    for (int64_t d : batch) B *= x.shape()[d];
    for (int64_t d : free) F *= x.shape()[d];
    for (int64_t d : contract) K *= x.shape()[d];
    if (contract_last) {
      perm.insert(perm.end(), free.begin(), free.end());
      perm.insert(perm.end(), contract.begin(), contract.end());
    } else {
      perm.insert(perm.end(), contract.begin(), contract.end());
      perm.insert(perm.end(), free.begin(), free.end());
    }
    return transpose(x, perm);
  };
  int64_t B, M, K, B2, N, K2;
  Array l = arrange(lhs, dims.lhs_batch, dims.lhs_contract, true, B, M, K);
  Array r = arrange(rhs, dims.rhs_batch, dims.rhs_contract, false, B2, N, K2);
  const DType acc = accumulator_dtype(lhs.dtype(), rhs.dtype());
  l = l.astype(acc);
  r = r.astype(acc);
  Shape out_shape;
  for (int64_t d : dims.lhs_batch) out_shape.push_back(lhs.shape()[d]);
  for (int64_t d = 0; d < lhs.rank(); ++d)
    if (std::find(dims.lhs_batch.begin(), dims.lhs_batch.end(), d) == dims.lhs_batch.end() &&
        std::find(dims.lhs_contract.begin(), dims.lhs_contract.end(), d) == dims.lhs_contract.end())
      out_shape.push_back(lhs.shape()[d]);
  for (int64_t d = 0; d < rhs.rank(); ++d)
    if (std::find(dims.rhs_batch.begin(), dims.rhs_batch.end(), d) == dims.rhs_batch.end() &&
        std::find(dims.rhs_contract.begin(), dims.rhs_contract.end(), d) == dims.rhs_contract.end())
      out_shape.push_back(rhs.shape()[d]);
  Array out(acc, out_shape);
  dispatch_dtype(acc, [&]<class A>() {
    if constexpr (std::is_same_v<A, float> || std::is_same_v<A, double> || std::is_same_v<A, int32_t> ||
                  std::is_same_v<A, int64_t>)
      batched_matmul<A>(l.data_as<A>(), r.data_as<A>(), out.mutable_data_as<A>(), B, M, K, N);
  });
  return out.astype(result_dtype);
}

}  // namespace tessera::rt
