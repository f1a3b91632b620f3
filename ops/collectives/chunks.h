// What the collective kernels share: the checks of their arguments, how an array is cut into the
// chunks of one mesh axis, the blocks a chunk is worked on in, the barrier among the devices a
// kernel talks to, and their pallas_call options.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <functional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/pallas_call.h"
#include "dsl/ref.h"
#include "ops/collectives/collectives.h"

namespace tessera::collectives::detail {

// The size of mesh axis `axis_name` for collective `api`: a UserError outside pl::shard_map or for
// an axis the mesh does not have.
int64_t axis_size_for(const char* api, const std::string& axis_name, std::source_location loc);

// x cut along `dim` into n chunks: x is [outer, n, inner] (a reshape, no copy) and chunk p is
// x[:, p, :], [outer, inner]. `shape` is one chunk's shape in x's rank (dim divided by n).
struct Chunks {
  int64_t n = 1, outer = 1, inner = 1;
  Shape shape;
  std::string key() const;  // what a compiled kernel over these chunks depends on
};
// A UserError unless x's dim `dim` splits into n equal chunks.
Chunks chunks_of(const char* api, const Array& x, const std::string& axis_name, int64_t n, int64_t dim,
                 std::source_location loc);

// A UserError unless x is f32 or bf16 (the reductions' dtypes).
void check_float(const char* api, const Array& x, std::source_location loc);

// A [rows, cols] chunk cut into (br, bc) blocks of about `elements` each: whole rows of blocks of up
// to `elements` columns.
struct Blocks {
  int64_t rows = 1, cols = 1, br = 1, bc = 1;
};
Blocks blocks_of(const char* api, int64_t rows, int64_t cols, int64_t elements, std::source_location loc);

// Traces body(rows, cols) once per block shape: a loop over the whole blocks and the partial last
// row and column blocks after it, so every block has a static shape.
void for_each_block(const Blocks& b, const std::function<void(const Indexer& rows, const Indexer& cols)>& body);

// Every device signals the barrier semaphore of each device in `peers` (positions along
// `axis_name`, computed by the kernel) and waits for as many signals: after it, the peers have
// entered this launch, so copies into them land in this call's buffers.
void barrier_with(const std::string& axis_name, const std::vector<Value>& peers);

// The pallas_call options of a collective kernel named `name` (the barrier needs a collective id).
CallOptions call_options(const Options& o, const std::string& name, int64_t collective_id);

// ops::memoised_call for the current mesh: its trace depends on the mesh (device ids resolve
// against it), so each mesh keeps a PallasCall of its own, whose last program is then its own.
PallasCall<std::vector<Array>> memoised_on_mesh(const std::string& key, const Options& o, std::source_location loc,
                                                const std::function<PallasCall<std::vector<Array>>()>& make);

}  // namespace tessera::collectives::detail
