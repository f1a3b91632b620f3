// Collectives as tessera kernels, written as a Pallas user writes them on a TPU: remote async copies
// between the devices of one mesh axis, DMA semaphores that count the bytes, a regular semaphore for
// flow control and the barrier semaphore of the launch. Each is called inside pl::shard_map on one
// device's shard, like jax.lax's collectives, and every device along the axis must call it:
//
//   namespace cl = tessera::collectives;
//   pl::Array s = cl::reduce_scatter(x, "x", /*scatter_dimension=*/0);   psum_scatter(x, 'x', tiled=True)
//   pl::Array t = cl::reduce_scatter(x, {"x", "y"}, 1);                  over both axes of a 2-D mesh
//   pl::Array a = cl::all_to_all(x, "y", /*split_axis=*/0, /*concat_axis=*/1, /*tiled=*/true);
//   pl::Array g = cl::all_gather(x, "x", /*axis=*/0);                    all_gather(x, 'x', tiled=True)
//   pl::Array r = cl::all_reduce(x, "x");                                psum(x, 'x')
//
// reduce_scatter: a ring. At step s every device adds its own chunk to the partial sum its left
// neighbour sent and sends the result on to its right neighbour, block by block, so the copy of one
// block overlaps the add of the next; partial sums arrive in two slots (double buffering), so the
// left neighbour's next copy overlaps this step's adds, and a capacity semaphore tells it when a
// slot is free again. After n - 1 steps device i holds chunk i of the sum over the axis. Chunks are
// cut into blocks of about block_elements (the last row and column blocks partial: any chunk size
// works). f32 or bf16; sums are always f32 (partial sums travel in f32), rounded to x's dtype once.
// The sum over devices runs in ring order (starting after the owner), not index order, so it can
// differ from pl::psum_scatter in the last bits. Over two axes it is two phases: along the first
// axis in f32, then along the second; device (i, j) gets chunk i * size(second) + j, as jax's
// psum_scatter over ('x', 'y').
//
// all_to_all (jax.lax.all_to_all): chunk j of split_axis goes to device j, which places the chunk
// from device i at position i along concat_axis. Every copy goes straight from the sender's input
// into the receiver's output (strided windows on both sides, no staging), each source with its own
// receive semaphore. tiled = false: split_axis must have the axis' size; it is removed and an axis
// of that size is inserted at concat_axis.
//
// all_gather: a ring; at step s every device forwards to its right neighbour the chunk it received at
// step s - 1 (the seed's 1-D ring all-gather over any axis and dim). all_reduce: a reduce_scatter of
// the flattened array followed by an all_gather of the chunks (the bandwidth-optimal ring all-reduce),
// so it needs the number of elements to be a multiple of the axis size.
//
// Library layer (ops/), over the front end.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/specs.h"
#include "runtime/array.h"

namespace tessera::collectives {

struct Options {
  // Elements of one block of the reduce-scatter's adds (and of each copy it starts), > 0.
  int64_t block_elements = 65536;
  std::optional<InterpretParams> interpret;  // run in the interpreter (also: TESSERA_INTERPRET=1)
  // Run each compiled kernel again in the interpreter and compare (docs/design.md §4.14).
  bool check_against_interpreter = false;
};

// The sum of x over the devices along `axis_name`, device i keeping part i of scatter_dimension
// (whose size must be a multiple of the axis size). f32 or bf16.
Array reduce_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension = 0, const Options& options = {},
                     std::source_location loc = std::source_location::current());
// Over several axes (a 2-D mesh's two), one phase per axis in the order given.
Array reduce_scatter(const Array& x, const std::vector<std::string>& axis_names, int64_t scatter_dimension = 0,
                     const Options& options = {}, std::source_location loc = std::source_location::current());
// reduce_scatter(x, {"x", "y"}, dim): a braced list of names is this overload (the braces would also
// fit std::string's (first, last) constructor and make the call ambiguous).
inline Array reduce_scatter(const Array& x, std::initializer_list<std::string> axis_names, int64_t scatter_dimension = 0,
                            const Options& options = {}, std::source_location loc = std::source_location::current()) {
  return reduce_scatter(x, std::vector<std::string>(axis_names), scatter_dimension, options, loc);
}

Array all_to_all(const Array& x, const std::string& axis_name, int64_t split_axis, int64_t concat_axis, bool tiled = false,
                 const Options& options = {}, std::source_location loc = std::source_location::current());

// The blocks of all devices along `axis_name`, joined along `axis` (tiled).
Array all_gather(const Array& x, const std::string& axis_name, int64_t axis = 0, const Options& options = {},
                 std::source_location loc = std::source_location::current());

// The sum of x over the devices along `axis_name`, on every device. f32 or bf16.
Array all_reduce(const Array& x, const std::string& axis_name, const Options& options = {},
                 std::source_location loc = std::source_location::current());

}  // namespace tessera::collectives
