#include "runtime/differential.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/numeric.h"

namespace tessera::rt {

namespace {

double default_rtol(DType t) {
  switch (t) {
    case DType::bf16: return 0x1p-6;  // two ulps of an 8-bit significand
    case DType::f16: return 0x1p-9;   // two ulps of an 11-bit significand
    case DType::f32: return 1e-4;
    case DType::f64: return 1e-9;
    default: return 0;
  }
}

template <class T>
std::string value_text(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
  else if constexpr (std::is_same_v<T, double>) return fmt::format("{:.17g}", v);
  else if constexpr (is_float_storage_v<T>) return fmt::format("{:.9g}", to_double(v));
  else return fmt::format("{}", static_cast<int64_t>(v));
}

}  // namespace

Tolerance default_tolerance(const Array& interpreted) {
  const double rtol = default_rtol(interpreted.dtype());
  if (rtol == 0) return {};
  double scale = 0;
  dispatch_dtype(interpreted.dtype(), [&]<class T>() {
    if constexpr (is_float_storage_v<T>) {
      const T* v = interpreted.data_as<T>();
      for (int64_t i = 0; i < interpreted.size(); ++i)
        if (const double d = std::fabs(to_double(v[i])); std::isfinite(d)) scale = std::max(scale, d);
    }
  });
  return {rtol, rtol * scale};
}

std::optional<Mismatch> first_mismatch(const Array& compiled, const Array& interpreted, std::optional<Tolerance> tolerance,
                                       bool skip_unwritten) {
  const Tolerance tol = tolerance.value_or(default_tolerance(interpreted));
  std::optional<Mismatch> found;
  dispatch_dtype(interpreted.dtype(), [&]<class T>() {
    const T* c = compiled.data_as<T>();
    const T* r = interpreted.data_as<T>();
    auto agree = [&](T x, T y) {
      if constexpr (is_float_storage_v<T>) {
        const double a = to_double(x), b = to_double(y);
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
        if (std::isinf(a) || std::isinf(b)) return a == b;
        return std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(b);
      } else {
        return x == y;
      }
    };
    auto is_poison = [](T y) {
      if constexpr (is_float_storage_v<T>) return std::isnan(to_double(y));
      else return y == poison_value<T>(false);
    };
    for (int64_t i = 0; i < interpreted.size(); ++i) {
      if (agree(c[i], r[i])) continue;
      if (skip_unwritten && is_poison(r[i])) continue;
      if (!found) {
        found.emplace();
        found->flat = i;
        found->compiled = value_text(c[i]);
        found->interpreted = value_text(r[i]);
        found->interpreted_is_poison = is_poison(r[i]);
        found->tolerance = tol;
      }
      ++found->count;
    }
  });
  if (found) {
    found->index.assign(interpreted.shape().size(), 0);
    int64_t rest = found->flat;
    for (size_t d = interpreted.shape().size(); d-- > 0;) {
      found->index[d] = rest % interpreted.shape()[d];
      rest /= interpreted.shape()[d];
    }
  }
  return found;
}

}  // namespace tessera::rt
