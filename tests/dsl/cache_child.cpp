// Compiles one kernel and says where it came from: run twice with one TESSERA_CACHE_DIR, the second
// process must find the kernel on disk.
#include <tessera/tessera.hpp>

#include <cstdio>

#include "jit/llvm/compiler.h"

namespace pl = tessera;

int main() {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o() = x() * 3.0f + 1.0f; }, pl::GridSpec{},
                              pl::ShapeDtype({16}, pl::f32), {.name = "cache_child"});
  pl::Array out = call(pl::Array::arange(16, pl::f32));
  auto kernel = pl::jit::compile(call.lowered({pl::Array::arange(16, pl::f32)}));  // the live kernel: a memory hit
  const bool ok = out.at<float>({2}) == 7.0f && kernel->source() == pl::jit::CompiledKernel::Source::MemoryCache;
  std::printf("key %s result %s\n", kernel->key().c_str(), ok ? "ok" : "wrong");
  return ok ? 0 : 1;
}
