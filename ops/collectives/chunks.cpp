#include "ops/collectives/chunks.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsl/control.h"
#include "dsl/devices.h"
#include "dsl/semaphores.h"
#include "ops/library_call.h"
#include "runtime/mesh.h"

namespace tessera::collectives::detail {

namespace {
std::string shape_text(const Shape& s) { return fmt::format("({})", fmt::join(s, ", ")); }
}  // namespace

int64_t axis_size_for(const char* api, const std::string& axis_name, std::source_location loc) {
  const rt::DeviceContext* d = rt::current_device();
  if (!d)
    throw UserError(fmt::format("{} is a collective of pl::shard_map", api), "a call outside pl::shard_map",
                    "call it inside the function pl::shard_map runs on every device", loc);
  const std::vector<std::string>& names = d->mesh->axis_names();
  if (std::find(names.begin(), names.end(), axis_name) == names.end())
    throw UserError(fmt::format("{}: the mesh has no axis `{}`", api, axis_name), d->mesh->str(),
                    fmt::format("name one of its axes: {}", fmt::join(names, ", ")), loc);
  return d->mesh->axis_size(axis_name, loc);
}

std::string Chunks::key() const { return fmt::format("n={} outer={} inner={}", n, outer, inner); }

Chunks chunks_of(const char* api, const Array& x, const std::string& axis_name, int64_t n, int64_t dim,
                 std::source_location loc) {
  if (dim < 0 || dim >= x.rank())
    throw UserError(fmt::format("{}: dimension {} is not one of x's {} dims", api, dim, x.rank()),
                    fmt::format("x of shape {}, dimension {}", shape_text(x.shape()), dim),
                    fmt::format("pass a dimension in [0, {})", x.rank()), loc);
  if (x.shape()[dim] % n != 0)
    throw UserError(fmt::format("{}: dim {} of size {} does not split into the {} devices along `{}`", api, dim,
                                x.shape()[dim], n, axis_name),
                    fmt::format("x of shape {}", shape_text(x.shape())),
                    fmt::format("make dim {} a multiple of {}", dim, n), loc);
  Chunks c;
  c.n = n;
  c.shape = x.shape();
  c.shape[dim] /= n;
  for (int64_t d = 0; d < dim; ++d) c.outer *= x.shape()[d];
  for (int64_t d = dim; d < x.rank(); ++d) c.inner *= c.shape[d];
  return c;
}

void check_float(const char* api, const Array& x, std::source_location loc) {
  if (x.dtype() == DType::f32 || x.dtype() == DType::bf16) return;
  throw UserError(fmt::format("{}: x must be f32 or bf16 (the sum is taken in f32)", api),
                  fmt::format("x of dtype {}", dtype_name(x.dtype())), "convert it first: x.astype(pl::f32)", loc);
}

Blocks blocks_of(const char* api, int64_t rows, int64_t cols, int64_t elements, std::source_location loc) {
  if (elements <= 0)
    throw UserError(fmt::format("{}: block_elements must be positive", api), fmt::format("block_elements = {}", elements),
                    "pass e.g. block_elements = 65536", loc);
  Blocks b{rows, cols, 1, std::max<int64_t>(1, std::min(cols, elements))};
  b.br = std::clamp<int64_t>(elements / b.bc, 1, std::max<int64_t>(1, rows));
  return b;
}

void for_each_block(const Blocks& b, const std::function<void(const Indexer&, const Indexer&)>& body) {
  const int64_t whole_rows = b.rows / b.br, last_rows = b.rows % b.br;
  const int64_t whole_cols = b.cols / b.bc, last_cols = b.cols % b.bc;
  const auto br = static_cast<int32_t>(b.br), bc = static_cast<int32_t>(b.bc);
  auto along_row = [&](const Indexer& rows) {
    if (whole_cols > 0) loop(0, whole_cols, [&](Value j) { body(rows, ds(j * bc, b.bc)); });
    if (last_cols > 0) body(rows, ds(static_cast<int32_t>(whole_cols) * bc, last_cols));
  };
  if (whole_rows > 0) loop(0, whole_rows, [&](Value i) { along_row(ds(i * br, b.br)); });
  if (last_rows > 0) along_row(ds(static_cast<int32_t>(whole_rows) * br, last_rows));
}

void barrier_with(const std::string& axis_name, const std::vector<Value>& peers) {
  Ref barrier = get_barrier_semaphore();
  for (const Value& p : peers) semaphore_signal(barrier, 1, DeviceId({{axis_name.c_str(), p}}));
  semaphore_wait(barrier, static_cast<int64_t>(peers.size()));
}

CallOptions call_options(const Options& o, const std::string& name, int64_t collective_id) {
  CallOptions opts = ops::library_call_options({}, o.interpret, o.check_against_interpreter, name, {});
  opts.compiler_params.collective_id = collective_id;
  return opts;
}

PallasCall<std::vector<Array>> memoised_on_mesh(const std::string& key, const Options& o, std::source_location loc,
                                                const std::function<PallasCall<std::vector<Array>>()>& make) {
  return ops::memoised_call(key + " " + rt::current_device()->mesh->str(), o.interpret, o.check_against_interpreter, loc,
                            make);
}

}  // namespace tessera::collectives::detail
