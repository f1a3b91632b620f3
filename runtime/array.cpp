#include "runtime/array.h"

#include <cstring>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include <sys/mman.h>

namespace tessera {

namespace {

// The element count of a new array's shape; a shape no array can have (jit/ir/type.h: shape_error)
// is an error here, at the caller's line, before num_elements could wrap.
int64_t checked_size(const Shape& shape, DType dtype, SourceLoc loc) {
  if (std::string why = shape_error(shape, dtype_size(dtype)); !why.empty())
    throw UserError(fmt::format("pl::Array: no array can have shape {}", shape_tuple_str(shape)),
                    fmt::format("a {} {} array: {}", shape_tuple_str(shape), dtype_name(dtype), why),
                    "give every dim as a size >= 0, small enough that the array's bytes fit in memory", loc);
  return num_elements(shape);
}

}  // namespace

namespace detail {

[[noreturn]] void array_size_mismatch(size_t given, const Shape& shape, DType dtype, SourceLoc loc) {
  checked_size(shape, dtype, loc);  // a shape no array can have says so first: its count means nothing
  throw UserError("Array::from_vector: the number of elements does not match the shape",
                  fmt::format("{} elements for shape {} ({} elements)", given, shape_tuple_str(shape), num_elements(shape)),
                  "pass exactly one element per position of the shape, in row-major order", loc);
}

void convert_elements(DType from, const std::byte* src, DType to, std::byte* dst, int64_t n) {
  if (n == 0) return;  // an empty vector's data() may be null, which memcpy may not be given even for 0 bytes
  if (from == to || (dtype_size(from) == dtype_size(to) && is_int(from) && is_int(to))) {
    std::memcpy(dst, src, static_cast<size_t>(n * dtype_size(from)));
    return;
  }
  dispatch_dtype(from, [&]<class S>() {
    dispatch_dtype(to, [&]<class D>() {
      const S* s = reinterpret_cast<const S*>(src);
      D* d = reinterpret_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<D, bool>) d[i] = widen(s[i]) != 0;
        else if constexpr (is_float_storage_v<S> && !is_float_storage_v<D>) d[i] = from_double<D>(to_double(s[i]));
        else if constexpr (is_float_storage_v<D> && !std::is_same_v<compute_t<D>, double>) {
          // f64 and integers reach bf16/f16 through f64 with one rounding (rules::f32_round_to_odd);
          // i64 beyond 2^53 has already rounded once into f64.
          if constexpr (std::is_same_v<D, float> || std::is_same_v<compute_t<S>, float>) d[i] = D(static_cast<float>(widen(s[i])));
          else d[i] = D(static_cast<double>(widen(s[i])));
        }
        else if constexpr (std::is_same_v<D, double>) d[i] = static_cast<double>(widen(s[i]));
        else d[i] = static_cast<D>(widen(s[i]));  // integer to integer: wraps like a C cast
      }
    });
  });
}

int64_t flat_index(const Shape& shape, const std::vector<int64_t>& index, SourceLoc loc) {
  if (index.size() != shape.size())
    throw UserError("Array::at: the index needs one entry per dimension",
                    fmt::format("index of {} entries for shape {}", index.size(), shape_tuple_str(shape)),
                    "pass one index per dimension", loc);
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape[d])
      throw UserError("Array::at: index out of range",
                      fmt::format("index {} in dimension {} of shape {}", index[d], d, shape_tuple_str(shape)),
                      fmt::format("use an index in [0, {})", shape[d]), loc);
    flat = flat * shape[d] + index[d];
  }
  return flat;
}

}  // namespace detail

namespace {

// Large arrays come from (and go back to) a small cache of freed blocks, so that a kernel called in
// a loop does not pay page faults for a fresh output every call. Blocks are 2 MiB-aligned multiples
// of 2 MiB on transparent huge pages: kernels walk blocks whose rows are far apart, and with 4 KiB
// pages every row of a block costs a TLB entry.
class LargeBlocks {
 public:
  static constexpr size_t kUnit = size_t{2} << 20;
  static constexpr size_t kCacheLimit = size_t{1} << 30;  // bytes kept for reuse, at most

  static LargeBlocks& get() {
    static LargeBlocks* blocks = new LargeBlocks();  // outlives every array
    return *blocks;
  }

  std::byte* take(size_t size) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        std::byte* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    auto* p = static_cast<std::byte*>(::operator new[](size, std::align_val_t{kUnit}));
    ::madvise(p, size, MADV_HUGEPAGE);
    return p;
  }

  void give(std::byte* p, size_t size) {
    {
      std::lock_guard lock(mutex_);
      if (cached_ + size <= kCacheLimit) {
        free_[size].push_back(p);
        cached_ += size;
        return;
      }
    }
    ::operator delete[](p, std::align_val_t{kUnit});
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<std::byte*>> free_;
  size_t cached_ = 0;
};

}  // namespace

namespace {
std::atomic<rt::StorageSource> g_storage_source{nullptr};
std::atomic<int64_t> g_storage_source_min{0};
}  // namespace

void rt::set_storage_source(StorageSource source, int64_t min_bytes) {
  g_storage_source_min.store(min_bytes);
  g_storage_source.store(source);
}

std::shared_ptr<std::byte[]> Array::allocate(int64_t nbytes, bool zero) {
  std::shared_ptr<std::byte[]> out;
  size_t size;
  if (const rt::StorageSource source = g_storage_source.load(); source && nbytes >= g_storage_source_min.load()) {
    if ((out = source(nbytes))) {
      if (zero) std::memset(out.get(), 0, static_cast<size_t>(nbytes));
      return out;
    }
  }
  if (nbytes >= static_cast<int64_t>(LargeBlocks::kUnit)) {
    size = (static_cast<size_t>(nbytes) + LargeBlocks::kUnit - 1) / LargeBlocks::kUnit * LargeBlocks::kUnit;
    out = std::shared_ptr<std::byte[]>(LargeBlocks::get().take(size),
                                       [size](std::byte* q) { LargeBlocks::get().give(q, size); });
  } else {
    // 64-byte alignment suits vector loads in both backends.
    size = (static_cast<size_t>(nbytes) + 63) / 64 * 64;
    out = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(::operator new[](size, std::align_val_t{64})),
                                       [](std::byte* q) { ::operator delete[](q, std::align_val_t{64}); });
  }
  if (zero) std::memset(out.get(), 0, size);
  return out;
}

std::shared_ptr<std::byte[]> Array::storage(const Shape& shape, DType dtype, int64_t nbytes, bool zero, SourceLoc loc) {
  try {
    return allocate(nbytes, zero);
  } catch (const std::bad_alloc&) {
    // Not a bare std::bad_alloc: say which array and how much.
    throw UserError(fmt::format("out of memory: cannot allocate a {} {} array", shape_tuple_str(shape), dtype_name(dtype)),
                    fmt::format("{} bytes ({:.2f} GiB)", nbytes, static_cast<double>(nbytes) / (1 << 30)),
                    "use smaller arrays (or blocks over a grid), or drop arrays that are no longer needed", loc);
  }
}

Array::Array() = default;

Array::Array(DType dtype, Shape shape, std::source_location loc)
    : dtype_(dtype), shape_(std::move(shape)), size_(checked_size(shape_, dtype, loc)) {
  if (nbytes() > static_cast<int64_t>(sizeof(inline_))) storage_ = storage(shape_, dtype_, nbytes(), true, loc);
}

Array Array::empty(Shape shape, DType dtype, std::source_location loc) {
  Array a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.size_ = checked_size(a.shape_, dtype, loc);
  if (a.nbytes() > static_cast<int64_t>(sizeof(a.inline_))) a.storage_ = storage(a.shape_, dtype, a.nbytes(), false, loc);
  return a;
}

std::byte* Array::mutable_data() {
  if (!storage_) return inline_;
  if (storage_.use_count() > 1) {
    auto fresh = storage(shape_, dtype_, nbytes(), false, {});  // a copy on write: no call of the user's to name
    std::memcpy(fresh.get(), storage_.get(), static_cast<size_t>(nbytes()));
    storage_ = std::move(fresh);
  }
  return storage_.get();
}

Array Array::full(Shape shape, double value, DType dtype, std::source_location loc) {
  Array a(dtype, std::move(shape), loc);
  dispatch_dtype(dtype, [&]<class T>() {
    T v = from_double<T>(value);
    T* p = a.mutable_data_as<T>();
    for (int64_t i = 0; i < a.size(); ++i) p[i] = v;
  });
  return a;
}

Array Array::arange(int64_t n, DType dtype, std::source_location loc) {
  if (n < 0)
    throw UserError("Array::arange: the count is negative", fmt::format("n = {}", n),
                    "pass n >= 0: arange(n) is 0, 1, ..., n - 1 (empty for 0)", loc);
  Array a(dtype, {n}, loc);
  dispatch_dtype(dtype, [&]<class T>() {
    T* p = a.mutable_data_as<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = from_double<T>(static_cast<double>(i));
  });
  return a;
}

// SplitMix64 finaliser: a well-mixed 64-bit hash of (seed, counter).
static uint64_t mix(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + counter * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

Array Array::random_uniform(Shape shape, DType dtype, uint64_t seed, double lo, double hi, std::source_location loc) {
  Array a(dtype, std::move(shape), loc);
  dispatch_dtype(dtype, [&]<class T>() {
    T* p = a.mutable_data_as<T>();
    for (int64_t i = 0; i < a.size(); ++i)
      p[i] = from_double<T>(lo + (hi - lo) * unit(mix(seed, static_cast<uint64_t>(i))));
  });
  return a;
}

Array Array::random_normal(Shape shape, DType dtype, uint64_t seed, std::source_location loc) {
  Array a(dtype, std::move(shape), loc);
  dispatch_dtype(dtype, [&]<class T>() {
    T* p = a.mutable_data_as<T>();
    for (int64_t i = 0; i < a.size(); ++i) {
      // Box-Muller on two independent uniforms per element.
      double u1 = 1.0 - unit(mix(seed, 2 * static_cast<uint64_t>(i)));
      double u2 = unit(mix(seed, 2 * static_cast<uint64_t>(i) + 1));
      p[i] = from_double<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  });
  return a;
}

namespace {
void check_one_element(const Array& a, const char* api, SourceLoc loc) {
  if (a.size() != 1)
    throw UserError(fmt::format("Array::{}: the array does not hold exactly one element", api),
                    fmt::format("a {} {} array of {} elements", shape_tuple_str(a.shape()), dtype_name(a.dtype()), a.size()),
                    "call it on a scalar or a one-element array; read other elements with at({...}) or to_vector<T>()",
                    loc);
}
}  // namespace

double Array::item(std::source_location loc) const {
  check_one_element(*this, "item", loc);
  double v = 0;
  dispatch_dtype(dtype_, [&]<class T>() { v = to_double(data_as<T>()[0]); });
  return v;
}

int64_t Array::item_int(std::source_location loc) const {
  check_one_element(*this, "item_int", loc);
  int64_t v = 0;
  dispatch_dtype(dtype_, [&]<class T>() {
    if constexpr (is_float_storage_v<T>) v = from_double<int64_t>(to_double(data_as<T>()[0]));
    else v = static_cast<int64_t>(data_as<T>()[0]);
  });
  return v;
}

Array Array::astype(DType dtype, std::source_location loc) const {
  if (dtype == dtype_) return *this;
  Array out(dtype, shape_, loc);
  detail::convert_elements(dtype_, data(), dtype, out.mutable_data(), size_);
  return out;
}

Array Array::reshape(Shape shape, std::source_location loc) const {
  if (std::string why = shape_error(shape, dtype_size(dtype_)); !why.empty())
    throw UserError(fmt::format("Array::reshape: no array can have shape {}", shape_tuple_str(shape)),
                    fmt::format("{} to {}: {}", shape_tuple_str(shape_), shape_tuple_str(shape), why),
                    "give every dim as a size >= 0", loc);
  if (num_elements(shape) != size_)
    throw UserError("Array::reshape: the new shape has a different number of elements",
                    fmt::format("{} ({} elements) to {} ({} elements)", shape_tuple_str(shape_), size_,
                                shape_tuple_str(shape), num_elements(shape)),
                    "keep the product of the dimensions unchanged", loc);
  Array out = *this;
  out.shape_ = std::move(shape);
  return out;
}

std::array<int64_t, 2> Array::shape2(std::source_location loc) const {
  if (shape_.size() != 2)
    throw UserError("Array::shape2: the array is not 2-D", fmt::format("shape {}", shape_tuple_str(shape_)),
                    "use shape() for arrays of other ranks", loc);
  return {shape_[0], shape_[1]};
}

std::string Array::element_string(int64_t i, std::source_location loc) const {
  if (i < 0 || i >= size_)
    throw UserError("Array::element_string: index out of range",
                    fmt::format("flat index {} of a {} array of {} elements", i, shape_tuple_str(shape_), size_),
                    size_ == 0 ? std::string("the array has no elements") : fmt::format("use an index in [0, {})", size_),
                    loc);
  return element_text(i);
}

std::string Array::element_text(int64_t i) const {
  std::string s;
  dispatch_dtype(dtype_, [&]<class T>() {
    T v = data_as<T>()[i];
    if constexpr (std::is_same_v<T, bool>) s = v ? "True" : "False";
    else if constexpr (is_float_storage_v<T>) s = fmt::format("{:.6g}", to_double(v));
    else if constexpr (std::is_unsigned_v<T>) s = fmt::format("{}", static_cast<uint64_t>(v));  // u64 past 2^63
    else s = fmt::format("{}", static_cast<int64_t>(v));
  });
  return s;
}

std::string Array::to_string(int64_t edge) const {
  std::string out = fmt::format("{}[{}] ", dtype_name(dtype_), fmt::join(shape_, ","));
  if (shape_.empty()) return out + element_text(0);
  // Recursive numpy-style printing with summarisation of long dims.
  std::vector<int64_t> strides(shape_.size(), 1);
  for (int64_t d = rank() - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape_[d + 1];
  auto rec = [&](auto&& self, size_t dim, int64_t base) -> std::string {
    std::string s = "[";
    int64_t n = shape_[dim];
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * edge && i == edge) {
        s += "..., ";
        i = n - edge - 1;
        continue;
      }
      s += dim + 1 == shape_.size() ? element_text(base + i) : self(self, dim + 1, base + i * strides[dim]);
      if (i + 1 < n) s += ", ";
    }
    return s + "]";
  };
  return out + rec(rec, 0, 0);
}

static bool same_shape(const Array& a, const Array& b) { return a.shape() == b.shape(); }

bool allclose(const Array& a, const Array& b, double rtol, double atol) {
  if (!same_shape(a, b)) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (std::isinf(x[i]) || std::isinf(y[i])) {
      if (x[i] != y[i]) return false;
      continue;
    }
    if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

double max_abs_diff(const Array& a, const Array& b) {
  if (!same_shape(a, b)) return std::numeric_limits<double>::infinity();
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, d);
  }
  return m;
}

}  // namespace tessera
