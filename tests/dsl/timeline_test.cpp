// Timelines: pl::profile / TESSERA_TRACE write Chrome trace JSON with the events both backends
// record (grid steps, copies, waits, named scopes, kernels, host scopes), on per-device, per-core
// tracks. The tests parse the file and check the events.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/support/kernels.h"

using namespace tessera;
namespace pl = tessera;
using doctest::Contains;
using nlohmann::json;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("tessera_{}_{}.json", name, ::getpid())).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// The spans with category `cat` (and name `name` when given): complete ("X") events, and async
// begin ("b") events given the "dur" up to their end ("e") event.
std::vector<json> events(const json& trace, const std::string& cat, const std::string& name = {}) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" || e.at("cat") != cat || (!name.empty() && e.at("name") != name)) continue;
    if (e.at("ph") == "X") out.push_back(e);
    if (e.at("ph") != "b") continue;
    json span = e;
    for (const json& end : trace.at("traceEvents"))
      if (end.at("ph") == "e" && end.at("id") == e.at("id")) span["dur"] = end.at("ts").get<double>() - e.at("ts").get<double>();
    REQUIRE(span.contains("dur"));
    CHECK(span.at("dur").get<double>() >= 0);
    out.push_back(span);
  }
  return out;
}

// The name metadata of a track (process_name with tid < 0 asks for the process's).
std::string track_name(const json& trace, int64_t pid, int64_t tid) {
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("pid") == pid &&
        (tid < 0 ? e.at("name") == "process_name" : e.at("name") == "thread_name" && e.at("tid") == tid))
      return e.at("args").at("name");
  return "";
}

bool inside(const json& inner, const json& outer) {
  const double eps = 1e-3;
  return inner.at("pid") == outer.at("pid") && inner.at("tid") == outer.at("tid") &&
         inner.at("ts").get<double>() >= outer.at("ts").get<double>() - eps &&
         inner.at("ts").get<double>() + inner.at("dur").get<double>() <=
             outer.at("ts").get<double>() + outer.at("dur").get<double>() + eps;
}

// A 2 x 3 grid: each step copies its row from HBM by DMA, signals and waits a semaphore, and runs a
// named scope around its arithmetic.
pl::Array run_traced_kernel(const pl::CallOptions& backend) {
  auto kernel = [](pl::Ref x_hbm, pl::Ref o, pl::Ref buf, pl::Ref dma, pl::Ref flag) {
    pl::Value row = pl::program_id(0) * 3 + pl::program_id(1);
    auto copy = pl::make_async_copy(x_hbm.at(pl::ds(row, 1), pl::all), buf, dma);
    copy.start();
    copy.wait();
    pl::semaphore_signal(flag, 2);
    pl::semaphore_wait(flag, 2);
    pl::named_scope("scale", [&] { o() = buf() * 2.0f; });
  };
  pl::CallOptions options = backend;
  options.name = "traced";
  auto call = pl::pallas_call(
      kernel,
      pl::GridSpec{.grid = {2, 3},
                   .in_specs = {pl::BlockSpec(pl::ANY)},
                   .out_specs = {pl::BlockSpec({1, 8}, [](pl::Value i, pl::Value j) { return pl::idx(i * 3 + j, 0); })},
                   .scratch_shapes = {pl::VMEM({1, 8}, pl::f32), pl::SemaphoreType::DMA, pl::SemaphoreType::REGULAR}},
      pl::ShapeDtype({6, 8}, pl::f32), options);
  return call(pl::Array::arange(48, pl::f32).reshape({6, 8}));
}

}  // namespace

TEST_SUITE("dsl") {
  TEST_CASE("timeline: steps, copies, waits and named scopes of one kernel, from both backends") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const std::string path = temp_path("kernel");
      pl::Array out = pl::profile(path, [&] {
        return pl::named_scope("host work", [&] { return run_traced_kernel(backend); });
      });
      CHECK(out.at<float>({5, 7}) == 94.0f);
      const json trace = read_json(path);
      std::filesystem::remove(path);

      const std::vector<json> kernels = events(trace, "kernel", "traced");
      REQUIRE(kernels.size() >= 1);
      const std::vector<json> steps = events(trace, "step");
      CHECK(steps.size() == 6);
      CHECK(events(trace, "step", "step (1, 2)").size() == 1);
      const std::vector<json> scopes = events(trace, "scope", "scale");
      CHECK(scopes.size() == 6);
      const std::vector<json> waits = events(trace, "wait");
      CHECK(events(trace, "wait", "DMA wait").size() == 6);
      CHECK(events(trace, "wait", "semaphore_wait").size() == 6);
      for (const json& w : waits) {
        CHECK(w.at("args").at("semaphore").get<std::string>().find("semaphore") != std::string::npos);
        CHECK(w.at("args").at("at").get<std::string>().find("timeline_test.cpp") != std::string::npos);
      }
      const std::vector<json> copies = events(trace, "dma", "copy 32 B");
      CHECK(copies.size() >= 6);  // the row copies (block copies of the output add theirs)
      // Scopes and waits sit inside a step, steps inside the kernel, on the core's track; copies sit
      // on the core's copy track.
      for (const json& s : scopes) {
        bool in_step = false;
        for (const json& st : steps) in_step = in_step || inside(s, st);
        CHECK(in_step);
      }
      for (const json& st : steps) {
        bool in_kernel = false;
        for (const json& k : kernels) in_kernel = in_kernel || inside(st, k);
        CHECK(in_kernel);
        CHECK(track_name(trace, st.at("pid"), st.at("tid")).rfind("core ", 0) == 0);
      }
      for (const json& c : copies)
        CHECK(track_name(trace, c.at("pid"), c.at("tid")).find("copies") != std::string::npos);
      // The host scope encloses everything, on the host track.
      const std::vector<json> host = events(trace, "scope", "host work");
      REQUIRE(host.size() == 1);
      CHECK(track_name(trace, host[0].at("pid"), host[0].at("tid")) == "host");
      CHECK(host[0].at("ts").get<double>() <= kernels[0].at("ts").get<double>());
    });
  }

  TEST_CASE("timeline: one process per device of a mesh, remote copies on the copy tracks") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      const pl::Mesh mesh({4}, {"x"});
      auto kernel = [](pl::Ref in, pl::Ref out, pl::Ref send, pl::Ref recv) {
        pl::Value right = (pl::axis_index("x") + 1) % 4;
        auto copy = pl::make_async_remote_copy(in, out, send, recv, pl::DeviceId({{"x", right}}));
        copy.start();
        copy.wait();
      };
      auto f = testing::on_every_device(kernel, mesh, pl::P("x"), {pl::SemaphoreType::DMA, pl::SemaphoreType::DMA},
                                        backend);
      const std::string path = temp_path("mesh");
      pl::profile(path, [&] { f(pl::Array::arange(16, pl::f32)); });
      const json trace = read_json(path);
      std::filesystem::remove(path);
      for (int64_t d = 0; d < 4; ++d) {
        CHECK(track_name(trace, d, -1) == fmt::format("device {} (x={})", d, d));
        int64_t remote = 0;
        for (const json& e : events(trace, "dma"))
          if (e.at("pid") == d && e.at("name") == fmt::format("remote copy 16 B to device {}", (d + 1) % 4)) ++remote;
        CHECK(remote == 1);
        int64_t bodies = 0;
        for (const json& e : events(trace, "scope", "shard_map")) bodies += e.at("pid") == d;
        CHECK(bodies == 1);
      }
    });
  }

  TEST_CASE("timeline: mpmd_map participants are cores (of a CoreMesh) or devices (of a Mesh)") {
    testing::for_each_backend([&](const pl::CallOptions& backend) {
      // A core hands a flag to two devices' worth of waiters: each waits for its own signal.
      auto producer = [](pl::Ref, pl::Ref flags) {
        pl::named_scope("produce", [&] {
          pl::semaphore_signal(flags.at(0));
          pl::semaphore_signal(flags.at(1));
        });
      };
      auto waiter = [](pl::Ref, pl::Ref flags) { pl::semaphore_wait(flags.at(pl::axis_index("x"))); };
      pl::CallOptions options = backend;
      options.name = "handover";
      auto call = pl::mpmd_map({{pl::CoreMesh("core", 1), producer}, {pl::Mesh({2}, {"x"}), waiter}},
                               pl::ShapeDtype({8}, pl::f32), {pl::SemaphoreType::REGULAR({2})}, options);
      const std::string path = temp_path("mpmd");
      pl::profile(path, [&] { call(); });
      const json trace = read_json(path);
      std::filesystem::remove(path);
      const std::vector<json> kernels = events(trace, "kernel", "handover");
      REQUIRE(kernels.size() == 3);
      // The producer is core 0 of device 0; the waiters are devices 0 and 1 of their mesh, as cores 1 and 2.
      std::set<std::pair<int64_t, std::string>> where;
      for (const json& k : kernels) where.emplace(k.at("pid"), track_name(trace, k.at("pid"), k.at("tid")));
      CHECK(where == std::set<std::pair<int64_t, std::string>>{{0, "core 0"}, {0, "core 1"}, {1, "core 2"}});
      CHECK(track_name(trace, 1, -1) == "device 1 (x=1)");
      const std::vector<json> scopes = events(trace, "scope", "produce");
      REQUIRE(scopes.size() == 1);
      CHECK(track_name(trace, scopes[0].at("pid"), scopes[0].at("tid")) == "core 0");
      CHECK(events(trace, "wait", "semaphore_wait").size() == 2);
    });
  }

  TEST_CASE("timeline: TESSERA_TRACE records a whole process, written at exit") {
    const std::string path = temp_path("env");
    const std::string run = fmt::format("TESSERA_TRACE={} {}/jit_cache_child > /dev/null 2>&1", path, TESSERA_TEST_BIN_DIR);
    REQUIRE(std::system(run.c_str()) == 0);
    const json trace = read_json(path);
    std::filesystem::remove(path);
    CHECK(events(trace, "kernel", "cache_child").size() == 1);
    CHECK(events(trace, "step").size() == 1);
  }

  TEST_CASE("timeline: misuse is a UserError") {
    CHECK_THROWS_WITH_AS(pl::stop_trace(), Contains("pl::stop_trace: no timeline is being recorded"), UserError);
    CHECK_THROWS_WITH_AS(pl::start_trace(""), Contains("pl::start_trace needs a file"), UserError);
    const std::string path = temp_path("twice");
    pl::start_trace(path);
    CHECK_THROWS_WITH_AS(pl::start_trace(path), Contains("a timeline is already being recorded"), UserError);
    CHECK(pl::stop_trace() == path);
    std::filesystem::remove(path);
    CHECK_THROWS_WITH_AS(pl::profile("/nonexistent-dir/trace.json", [] {}), Contains("cannot write the timeline"),
                         UserError);
  }
}
