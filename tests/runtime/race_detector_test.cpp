// The race detector on its own (runtime/race_detector.h): happens-before through program order,
// signals, copies and the waits that consume them; exact byte ranges (strided and masked windows);
// one report per pair of sites and buffer.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/launch.h"
#include "runtime/race_detector.h"

using namespace tessera;
using namespace tessera::rt;

namespace {

constexpr SourceLoc at(uint32_t line) {
  SourceLoc l;
  l.file = "kernel.cpp";
  l.line = line;
  return l;
}

// Two cores of one launch sharing an operand (8 x 16 f32, "output 0") and a semaphore operand; each
// core has a semaphore of its own (an allocation).
struct Fixture {
  Launch launch{0};
  std::unique_ptr<Buffer> out = make_buffer("output 0", DType::f32, {8, 16}, MemorySpace::ANY, true);
  std::unique_ptr<Buffer> shared_sem = make_buffer("scratch 0", DType::sem, {1}, MemorySpace::SEMAPHORE, true);
  std::unique_ptr<Buffer> own_sem[2] = {make_buffer("scratch 1", DType::dma_sem, {1}, MemorySpace::SEMAPHORE, true),
                                        make_buffer("scratch 1", DType::dma_sem, {1}, MemorySpace::SEMAPHORE, true)};
  CoreContext core0{launch, 0}, core1{launch, 1};
  RaceDetector races{false};
  int a = -1, b = -1;

  Fixture() {
    for (CoreContext* c : {&core0, &core1}) {
      c->add_region(-1, out->data(), 8 * 16 * 4);
      c->add_region(-2, shared_sem->data(), 8);
      c->add_region(7, own_sem[c->point.core]->data(), 8);
    }
    a = races.add_actor(core0, 0, 0);
    b = races.add_actor(core1, 0, 1);
  }
  RefView rows(int64_t lo, int64_t n) const { return RefView{out.get(), lo * 16, {n, 16}, {16, 1}}; }
  RefView cols(int64_t lo, int64_t n) const { return RefView{out.get(), lo, {8, n}, {16, 1}}; }
  const int64_t* sem() const { return reinterpret_cast<const int64_t*>(shared_sem->data()); }
  const int64_t* dma_sem(int core) const { return reinterpret_cast<const int64_t*>(own_sem[core]->data()); }
};

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("race detector: two cores writing the same bytes race, other bytes, reads, or one core do not") {
    Fixture f;
    f.races.access(f.a, AccessKind::write, f.cols(0, 8), nullptr, at(10));
    f.races.access(f.b, AccessKind::write, f.cols(8, 8), nullptr, at(11));  // the other columns: rows interleave
    f.races.access(f.a, AccessKind::read, f.cols(0, 8), nullptr, at(12));   // program order
    f.races.access(f.b, AccessKind::read, f.rows(0, 8), nullptr, at(13));   // ... but core 0's columns are unordered
    REQUIRE(f.races.reports().size() == 1);
    const RaceReport r = f.races.reports()[0];
    CHECK(r.buffer == "output 0");
    CHECK(r.first.kind == AccessKind::write);
    CHECK(r.first.loc.line == 10);
    CHECK(r.first.region == "[0:8, 0:8]");
    CHECK(r.second.kind == AccessKind::read);
    CHECK(r.second.point.core == 1);
    CHECK(r.message.find("write of output 0[0:8, 0:8] by device 0, core 0 at kernel.cpp:10") != std::string::npos);
    CHECK(r.message.find("read of output 0[0:8, 0:16] by device 0, core 1 at kernel.cpp:13") != std::string::npos);
    // Reads of both cores never race with each other.
    Fixture g;
    g.races.access(g.a, AccessKind::read, g.rows(0, 8), nullptr, at(1));
    g.races.access(g.b, AccessKind::read, g.rows(0, 8), nullptr, at(2));
    CHECK(g.races.reports().empty());
  }

  TEST_CASE("race detector: a signal orders what came before it with what follows the wait that takes it") {
    Fixture f;
    f.races.access(f.a, AccessKind::write, f.rows(0, 4), nullptr, at(1));
    f.races.signal(f.a, f.sem(), 1);
    f.races.access(f.a, AccessKind::write, f.rows(4, 4), nullptr, at(2));  // after the signal: not ordered
    f.races.wait(f.b, f.sem(), 1);
    f.races.access(f.b, AccessKind::read, f.rows(0, 4), nullptr, at(3));
    CHECK(f.races.reports().empty());
    f.races.access(f.b, AccessKind::read, f.rows(4, 4), nullptr, at(4));
    REQUIRE(f.races.reports().size() == 1);
    CHECK(f.races.reports()[0].first.loc.line == 2);
    CHECK(f.races.reports()[0].second.loc.line == 4);
  }

  TEST_CASE("race detector: a wait takes the increments in order, and orders only those it takes") {
    Fixture f;
    f.races.access(f.a, AccessKind::write, f.rows(0, 4), nullptr, at(1));
    f.races.signal(f.a, f.sem(), 1);
    f.races.access(f.b, AccessKind::write, f.rows(4, 4), nullptr, at(2));
    f.races.signal(f.b, f.sem(), 1);
    // Core 1 takes one of the two: core 0's, which came first.
    f.races.wait(f.b, f.sem(), 1);
    f.races.access(f.b, AccessKind::write, f.rows(0, 4), nullptr, at(3));
    CHECK(f.races.reports().empty());
    // Core 0 takes the other, core 1's own: it now knows what core 1 did before signalling.
    f.races.wait(f.a, f.sem(), 1);
    f.races.access(f.a, AccessKind::read, f.rows(4, 4), nullptr, at(4));
    CHECK(f.races.reports().empty());
    // ... but not core 1's write after its signal.
    f.races.access(f.a, AccessKind::read, f.rows(0, 4), nullptr, at(5));
    REQUIRE(f.races.reports().size() == 1);
    CHECK(f.races.reports()[0].first.loc.line == 3);
  }

  TEST_CASE("race detector: a copy runs from its start to the wait that consumes it, and is known through signals") {
    Fixture f;
    const RefView top = f.rows(0, 4), bottom = f.rows(4, 4);
    f.races.access(f.a, AccessKind::write, top, nullptr, at(1));
    const int64_t copy = f.races.start_copy(f.a, top, bottom, at(2));  // after the write: ordered
    CHECK(f.races.reports().empty());
    f.races.access(f.a, AccessKind::read, top, nullptr, at(3));  // reading a copy's source meanwhile is fine
    CHECK(f.races.reports().empty());
    f.races.access(f.a, AccessKind::read, bottom, nullptr, at(4));  // its destination is not
    REQUIRE(f.races.reports().size() == 1);
    CHECK(f.races.reports()[0].first.kind == AccessKind::dma_write);
    CHECK(f.races.reports()[0].second.loc.line == 4);
    f.races.copy_done(f.a, copy, f.dma_sem(0), 4 * 16 * 4);
    f.races.wait(f.a, f.dma_sem(0), 4 * 16 * 4);
    f.races.access(f.a, AccessKind::write, bottom, nullptr, at(5));  // after the wait
    CHECK(f.races.reports().size() == 1);
    // Core 1 learns of the copy from core 0's signal after the wait.
    f.races.signal(f.a, f.sem(), 1);
    f.races.wait(f.b, f.sem(), 1);
    const int64_t second = f.races.start_copy(f.b, bottom, top, at(6));
    CHECK(f.races.reports().size() == 1);
    // A copy concurrent with another core's write of its source races with it.
    f.races.access(f.a, AccessKind::write, bottom, nullptr, at(7));
    CHECK(f.races.reports().size() == 2);
    CHECK(f.races.reports()[1].first.kind == AccessKind::dma_read);
    CHECK(f.races.reports()[1].first.point.core == 1);
    (void)second;
  }

  TEST_CASE("race detector: a masked access covers only its mask, one report per pair of sites and buffer") {
    Fixture f;
    std::vector<uint8_t> left(8 * 16), right(8 * 16);
    for (size_t i = 0; i < left.size(); ++i) {
      left[i] = (i % 16) < 5;
      right[i] = !left[i];
    }
    const Array mask_left = Array::from_vector(std::vector<bool>(left.begin(), left.end()), {8, 16});
    const Array mask_right = Array::from_vector(std::vector<bool>(right.begin(), right.end()), {8, 16});
    f.races.access(f.a, AccessKind::write, f.rows(0, 8), &mask_left, at(1));
    f.races.access(f.b, AccessKind::write, f.rows(0, 8), &mask_right, at(2));
    CHECK(f.races.reports().empty());
    for (int rep = 0; rep < 3; ++rep) f.races.access(f.b, AccessKind::read, f.rows(0, 8), nullptr, at(3));
    f.races.access(f.b, AccessKind::read, f.rows(2, 1), nullptr, at(3));
    CHECK(f.races.reports().size() == 1);
  }
}
