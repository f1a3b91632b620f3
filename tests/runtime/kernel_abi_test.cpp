#include <doctest/doctest.h>

#include <set>
#include <string>
#include <type_traits>

#include "runtime/kernel_abi.h"

using namespace tessera;

// The descriptors carry the declared types: the code generator derives its LLVM declarations from them.
static_assert(std::is_same_v<decltype(rt::abi::fetch_block)::Type, decltype(tessera_rt_fetch_block)>);
static_assert(std::is_same_v<decltype(rt::abi::alloc)::Type, void*(rt::CoreContext*, int32_t)>);

TEST_SUITE("runtime") {
  TEST_CASE("kernel ABI: one symbol per listed function, each bound to its own address") {
    size_t listed = 0;
#define TESSERA_RT_FUNCTION(name, ret, params) ++listed;
#include "runtime/kernel_abi.def"
#undef TESSERA_RT_FUNCTION
    const auto symbols = rt::kernel_abi_symbols();
    CHECK(symbols.size() == listed);
    std::set<std::string> names;
    for (const auto& [name, address] : symbols) {
      CHECK(name.starts_with("tessera_rt_"));
      CHECK(address != nullptr);
      names.emplace(name);
    }
    CHECK(names.size() == symbols.size());
    CHECK(names.count("tessera_rt_remote_dma_start") == 1);
    for (const auto& [name, address] : symbols)
      if (name == "tessera_rt_ipow") CHECK(address == reinterpret_cast<void*>(&tessera_rt_ipow));
  }
}
