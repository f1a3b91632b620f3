// The paged attention kernel: each grid step gathers one sequence's pages for one kv head with
// double-buffered async copies and runs an online softmax over them (ops/attention/paged_attention.h).
#include "ops/attention/paged_attention.h"

#include <fmt/format.h>

#include <limits>
#include <string>
#include <vector>

#include "dsl/async_copy.h"
#include "dsl/control.h"
#include "ops/attention/blocks.h"
#include "ops/library_call.h"

namespace tessera::attention {

namespace {

constexpr const char* kApi = "paged_attention";

// The shapes and options the kernel is traced for. `logits` carries the logits rule shared with
// flash attention (scale, soft cap): its bq is the query heads of one kv head, its bk the tokens of
// a compute block.
struct Paged {
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t total_pages = 0, page_size = 0, pages_per_sequence = 0, pages_per_block = 0;
  detail::Problem logits;

  int64_t group() const { return heads / kv_heads; }
  int64_t block_tokens() const { return pages_per_block * page_size; }
  std::string key() const {
    return fmt::format("paged_attention b={} h={} kvh={} d={} pages={}x{} per_seq={} per_block={} {} scale={} cap={}",
                       batch, heads, kv_heads, head_dim, total_pages, page_size, pages_per_sequence, pages_per_block,
                       dtype_name(logits.dtype), logits.sm_scale, logits.soft_cap ? *logits.soft_cap : 0.0f);
  }
};

using detail::shape_text;

// The default compute block: the most pages whose tokens fit in 128 and that divide
// pages_per_sequence (at least one page).
int64_t default_pages_per_block(int64_t page_size, int64_t pages_per_sequence) {
  int64_t best = 1;
  for (int64_t n = 1; n <= pages_per_sequence && n * page_size <= 128; ++n)
    if (pages_per_sequence % n == 0) best = n;
  return best;
}

// Checks the operands and the options; lengths and page_indices are read on the host, so a length
// past the sequence's pages or a page outside the pool is an error here rather than a copy out of
// bounds in the kernel.
Paged plan(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths, const Array& page_indices,
           const PagedOptions& o, SourceLoc loc) {
  if (q.rank() != 3)
    throw UserError(fmt::format("{}: 'q' must be a 3-tensor [batch, heads, head_dim]", kApi),
                    fmt::format("'q' of shape {}", shape_text(q.shape())),
                    "pass one query token per sequence: [batch, heads, head_dim]", loc);
  if (k_pages.rank() != 4 || k_pages.shape() != v_pages.shape())
    throw UserError(fmt::format("{}: 'k_pages' and 'v_pages' must be 4-tensors of one shape "
                                "[kv_heads, total_pages, page_size, head_dim]",
                                kApi),
                    fmt::format("k_pages {}, v_pages {}", shape_text(k_pages.shape()), shape_text(v_pages.shape())),
                    "lay the cache out as [kv_heads, total_pages, page_size, head_dim]", loc);
  detail::check_float_operand(kApi, q, "q", loc);
  detail::check_float_operand(kApi, k_pages, "k_pages", loc);
  detail::check_float_operand(kApi, v_pages, "v_pages", loc);
  if (k_pages.dtype() != q.dtype() || v_pages.dtype() != q.dtype())
    throw UserError(fmt::format("{}: q, k_pages and v_pages must have one dtype", kApi),
                    fmt::format("q {}, k_pages {}, v_pages {}", dtype_name(q.dtype()), dtype_name(k_pages.dtype()),
                                dtype_name(v_pages.dtype())),
                    "convert them to one dtype (f32 or bf16)", loc);
  Paged p;
  p.batch = q.shape()[0];
  p.heads = q.shape()[1];
  p.head_dim = q.shape()[2];
  p.kv_heads = k_pages.shape()[0];
  p.total_pages = k_pages.shape()[1];
  p.page_size = k_pages.shape()[2];
  if (p.batch == 0 || p.heads == 0 || p.head_dim == 0 || p.kv_heads == 0 || p.total_pages == 0 || p.page_size == 0)
    throw UserError(fmt::format("{}: empty operand", kApi),
                    fmt::format("q {}, k_pages {}", shape_text(q.shape()), shape_text(k_pages.shape())),
                    "pass at least one sequence, head, feature, page and token per page", loc);
  if (k_pages.shape()[3] != p.head_dim || p.heads % p.kv_heads != 0)
    throw UserError(fmt::format("{}: q and k_pages do not fit together", kApi),
                    fmt::format("q {}, k_pages {}", shape_text(q.shape()), shape_text(k_pages.shape())),
                    "k_pages has q's head_dim, and q's heads are a multiple of k_pages' kv_heads", loc);
  if (lengths.dtype() != DType::i32 || lengths.shape() != Shape{p.batch})
    throw UserError(fmt::format("{}: 'lengths' must be i32 [batch] = ({})", kApi, p.batch),
                    fmt::format("dtype {}, shape {}", dtype_name(lengths.dtype()), shape_text(lengths.shape())),
                    fmt::format("pass an i32 array of {} sequence lengths", p.batch), loc);
  if (page_indices.dtype() != DType::i32 || page_indices.rank() != 2 || page_indices.shape()[0] != p.batch ||
      page_indices.shape()[1] == 0)
    throw UserError(fmt::format("{}: 'page_indices' must be i32 [batch, pages_per_sequence] with batch = {}", kApi,
                                p.batch),
                    fmt::format("dtype {}, shape {}", dtype_name(page_indices.dtype()),
                                shape_text(page_indices.shape())),
                    fmt::format("pass an i32 array of shape ({}, pages_per_sequence), pages_per_sequence >= 1", p.batch),
                    loc);
  p.pages_per_sequence = page_indices.shape()[1];
  p.pages_per_block = o.pages_per_compute_block.value_or(default_pages_per_block(p.page_size, p.pages_per_sequence));
  if (p.pages_per_block < 1 || p.pages_per_sequence % p.pages_per_block != 0)
    throw UserError(fmt::format("{}: pages_per_compute_block must be positive and divide pages_per_sequence = {}", kApi,
                                p.pages_per_sequence),
                    fmt::format("pages_per_compute_block = {}", p.pages_per_block),
                    fmt::format("pass a divisor of {} (or leave it unset)", p.pages_per_sequence), loc);
  const int64_t capacity = p.pages_per_sequence * p.page_size;
  const std::vector<int32_t> lens = lengths.to_vector<int32_t>();
  for (int64_t b = 0; b < p.batch; ++b)
    if (lens[b] < 0 || lens[b] > capacity)
      throw UserError(fmt::format("{}: lengths[{}] = {} is outside [0, pages_per_sequence * page_size = {}]", kApi, b,
                                  lens[b], capacity),
                      fmt::format("lengths[{}] = {} with {} pages of {} tokens per sequence", b, lens[b],
                                  p.pages_per_sequence, p.page_size),
                      "give each sequence more pages in page_indices, or a length it can hold", loc);
  const std::vector<int32_t> pages = page_indices.to_vector<int32_t>();
  for (size_t i = 0; i < pages.size(); ++i)
    if (pages[i] < 0 || pages[i] >= p.total_pages)
      throw UserError(fmt::format("{}: page_indices[{}, {}] = {} is not a page of the pool [0, {})", kApi,
                                  static_cast<int64_t>(i) / p.pages_per_sequence,
                                  static_cast<int64_t>(i) % p.pages_per_sequence, pages[i], p.total_pages),
                      fmt::format("page_indices[{}, {}] = {}", static_cast<int64_t>(i) / p.pages_per_sequence,
                                  static_cast<int64_t>(i) % p.pages_per_sequence, pages[i]),
                      "point unused entries at any valid page (e.g. 0): they are copied but masked", loc);
  p.logits.heads = p.heads;
  p.logits.head_dim = p.head_dim;
  p.logits.dtype = q.dtype();
  p.logits.bq = p.group();
  p.logits.bk = p.block_tokens();
  detail::set_logits_scale(p.logits, kApi, o.sm_scale, o.soft_cap, loc);
  return p;
}

// Grid (batch b, kv head g). q and o are the (group, head_dim) rows of the query heads that read kv
// head g. k_buf / v_buf hold two compute blocks (slots) of pages; each slot has its own k and v DMA
// semaphore. m, l and acc are the online softmax's running max, sum and p v, f32.
void paged_kernel(const Paged& p, Ref lengths, Ref page_indices, Ref q, Ref k_pages, Ref v_pages, Ref o, Ref k_buf,
                  Ref v_buf, Ref k_sems, Ref v_sems, Ref m, Ref l, Ref acc) {
  const Value b = program_id(0), g = program_id(1);
  const Value length = lengths[b];
  const auto block_tokens = static_cast<int32_t>(p.block_tokens());
  const auto per_block = static_cast<int32_t>(p.pages_per_block);
  // Only the blocks holding a token of the sequence are copied and computed.
  const Value blocks = (length + (block_tokens - 1)) / block_tokens;
  // The copies of compute block `block` into buffer slot `slot`, one per page of k and of v; all the
  // copies of a slot signal its semaphores, and each wait takes one page's bytes back.
  auto copies = [&](const Value& block, const Value& slot) {
    std::vector<AsyncCopyDescriptor> c;
    for (int64_t i = 0; i < p.pages_per_block; ++i) {
      const Value page = page_indices(b, block * per_block + static_cast<int32_t>(i));
      c.push_back(make_async_copy(k_pages.at(g, page), k_buf.at(slot, i), k_sems.at(slot)));
      c.push_back(make_async_copy(v_pages.at(g, page), v_buf.at(slot, i), v_sems.at(slot)));
    }
    return c;
  };
  const Value zero = full({}, 0, DType::i32);
  m() = -std::numeric_limits<float>::infinity();
  l() = 0.0f;
  acc() = 0.0f;
  when(blocks > 0, [&] {
    for (const AsyncCopyDescriptor& c : copies(zero, zero)) c.start();
  });
  const Shape rows{p.block_tokens(), p.head_dim};
  loop(0, blocks, [&](const Value& j) {
    const Value slot = j % 2;
    // Start the next block's copies into the other slot before computing this one, so they overlap;
    // that slot was last read by the previous iteration, which has finished.
    when(j + 1 < blocks, [&] {
      for (const AsyncCopyDescriptor& c : copies(j + 1, 1 - slot)) c.start();
    });
    for (const AsyncCopyDescriptor& c : copies(j, slot)) c.wait();
    // The block indices only place causal masks, which decoding has none of.
    Value s = detail::block_logits(p.logits, q(), k_buf(slot).reshape(rows), zero, zero, std::nullopt);
    // The tokens past the sequence's length (the tail of its last page, and pages after it).
    const Value position = iota({p.group(), p.block_tokens()}, 1) + j * block_tokens;
    s = where(position < length, s, detail::kMaskValue);
    detail::online_softmax_step(m, l, acc, s, v_buf(slot).reshape(rows), p.logits.dtype);
  });
  // A sequence of length 0 has l = 0 and acc = 0: its row is 0.
  const Value sum = l();
  o() = (acc() / where(sum > 0.0f, sum, 1.0f)).astype(o.dtype());
}

CostEstimate paged_cost(const Paged& p) {
  const int64_t tokens = p.batch * p.heads * p.pages_per_sequence * p.page_size;  // at most
  const int64_t elem = dtype_size(p.logits.dtype);
  return CostEstimate{.flops = 4 * tokens * p.head_dim,
                      .transcendentals = tokens,
                      .bytes_accessed = 2 * p.batch * p.heads * p.head_dim * elem +
                                        2 * p.batch * p.kv_heads * p.pages_per_sequence * p.page_size * p.head_dim * elem};
}

}  // namespace

Array paged_attention(const Array& q, const Array& k_pages, const Array& v_pages, const Array& lengths,
                      const Array& page_indices, const PagedOptions& o, std::source_location loc) {
  const Paged p = plan(q, k_pages, v_pages, lengths, page_indices, o, loc);
  const int64_t group = p.group(), d = p.head_dim;
  auto heads_of_kv = [](Value b, Value g, Ref, Ref) { return idx(b, g, 0); };
  PrefetchScalarGridSpec spec{
      .num_scalar_prefetch = 2,
      .grid = {p.batch, p.kv_heads},
      .in_specs = {BlockSpec({squeezed, group, d}, heads_of_kv), BlockSpec(ANY), BlockSpec(ANY)},
      .out_specs = {BlockSpec({squeezed, group, d}, heads_of_kv)},
      .scratch_shapes = {VMEM({2, p.pages_per_block, p.page_size, d}, q.dtype()),
                         VMEM({2, p.pages_per_block, p.page_size, d}, q.dtype()), SemaphoreType::DMA({2}),
                         SemaphoreType::DMA({2}), VMEM({group, 1}, DType::f32), VMEM({group, 1}, DType::f32),
                         VMEM({group, d}, DType::f32)}};
  CallOptions opts = ops::library_call_options({parallel, parallel}, o.interpret, o.check_against_interpreter, kApi,
                                               paged_cost(p));
  PallasCall<std::vector<Array>> call = ops::memoised_call(p.key(), o.interpret, o.check_against_interpreter, loc, [&] {
    return pallas_call(
        [p](Ref lengths, Ref pages, Ref q, Ref k, Ref v, Ref o, Ref kb, Ref vb, Ref ks, Ref vs, Ref m, Ref l, Ref acc) {
          paged_kernel(p, lengths, pages, q, k, v, o, kb, vb, ks, vs, m, l, acc);
        },
        spec, std::vector<ShapeDtype>{ShapeDtype(q.shape(), q.dtype())}, opts, loc);
  });
  return call({lengths, page_indices, q, k_pages, v_pages}, loc).at(0);
}

}  // namespace tessera::attention
