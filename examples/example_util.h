// Helpers shared by the numbered examples: naive host references, result checks, and running an
// example once per backend (today the interpreter) with the results compared.
#pragma once

#include <tessera/tessera.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace examples {

namespace pl = tessera;

// Element-wise f(a, b) on the host, in double, stored as a's dtype.
inline pl::Array host_map2(const pl::Array& a, const pl::Array& b, const std::function<double(double, double)>& f) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>(), z(x.size());
  for (size_t i = 0; i < x.size(); ++i) z[i] = f(x[i], y[i]);
  return pl::Array::from_vector(z, a.shape(), a.dtype());
}

// C[m, n] = sum_k A[m, k] B[k, n] on the host in double, stored as `dtype`.
inline pl::Array host_matmul(const pl::Array& a, const pl::Array& b, pl::DType dtype) {
  auto [m, k] = a.shape2();
  const int64_t n = b.shape()[1];
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>(), z(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double xv = x[i * k + p];
      for (int64_t j = 0; j < n; ++j) z[i * n + j] += xv * y[p * n + j];
    }
  return pl::Array::from_vector(z, {m, n}, dtype);
}

// Prints PASS/FAIL for one comparison and returns whether it passed.
inline bool check(const char* what, const pl::Array& got, const pl::Array& want, double rtol, double atol) {
  bool ok = pl::allclose(got, want, rtol, atol);
  std::printf("  %s: %s (max |diff| = %.3g)\n", what, ok ? "PASS" : "FAIL", pl::max_abs_diff(got, want));
  return ok;
}

// The backends an example runs in: compiled (the default) and the interpreter.
struct Backend {
  std::string name;
  pl::CallOptions options;
};
inline std::vector<Backend> backends() {
  pl::CallOptions interpret;
  interpret.interpret = pl::InterpretParams{};
  return {{"compiled", pl::CallOptions{}}, {"interpret", interpret}};
}

// What one run of an example produced: whether its own checks passed, and its main result.
struct Outcome {
  bool ok = false;
  pl::Array result;
};

// Runs body once per backend and compares the backends' results with each other (exactly when
// rtol = atol = 0: the same operations in the same order give the same bits). Returns the process
// exit code: 0 when every run passed and the backends agree.
inline int run_in_every_backend(const char* name, const std::function<Outcome(const pl::CallOptions&)>& body,
                                double rtol = 0.0, double atol = 0.0) {
  bool all = true;
  std::vector<std::pair<std::string, pl::Array>> results;
  for (const Backend& b : backends()) {
    std::printf("[%s] %s\n", name, b.name.c_str());
    // Kernels made inside library code (host collectives, host matmuls) follow TESSERA_INTERPRET.
    if (b.options.interpret) setenv("TESSERA_INTERPRET", "1", 1);
    else unsetenv("TESSERA_INTERPRET");
    try {
      Outcome o = body(b.options);
      all = all && o.ok;
      results.emplace_back(b.name, o.result);
    } catch (const std::exception& e) {
      std::printf("  error: %s\n", e.what());
      all = false;
    }
  }
  unsetenv("TESSERA_INTERPRET");
  for (size_t i = 1; i < results.size(); ++i) {
    bool same = pl::allclose(results[i].second, results[0].second, rtol, atol);
    std::printf("[%s] %s vs %s: %s (max |diff| = %.3g)\n", name, results[i].first.c_str(), results[0].first.c_str(),
                same ? "agree" : "DIFFER", pl::max_abs_diff(results[i].second, results[0].second));
    all = all && same;
  }
  std::printf("[%s] %s\n", name, all ? "OK" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace examples
