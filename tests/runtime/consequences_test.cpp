// The consequences of a first failure: told as short notes after it, deduplicated and capped, and
// the failure itself (type, place, line, time, first line) unchanged.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <exception>
#include <source_location>

#include "jit/ir/diagnostics.h"
#include "runtime/consequences.h"

using namespace tessera;
using namespace tessera::rt;

namespace {

std::exception_ptr runtime_error(const std::string& what, int device, SourceLoc loc) {
  return std::make_exception_ptr(RuntimeError(what, ExecutionPoint{device, 0, {}, {}}, loc));
}

// A deadlock report as LaunchGroup::report words it: device 1 and 3 wait, device 2 stopped.
std::string deadlock_report() {
  return std::string(kDeadlockReport) +
         " in shard_map; every participant waits or is done:\n"
         "    device 0: finished the kernel\n"
         "    device 1: semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2\n"
         "    device 2: stopped before launching it (its function threw)\n"
         "    device 3: semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2\n"
         "  no copies are in flight: copies between participants land when they start, or when their core blocks\n"
         "  fix: every wait needs a matching copy or signal";
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("consequences: a deadlock report becomes one note per blocked participant, said once") {
    Consequences after;
    // Every waiter throws the same report: its waits are told once.
    after.add("device 1", runtime_error(deadlock_report(), 1, {}));
    after.add("device 3", runtime_error(deadlock_report(), 3, {}));
    const std::vector<std::string> notes = after.notes();
    REQUIRE(notes.size() == 2);
    CHECK(notes[0] == "device 1 then waited for what never came: semaphore_wait on the barrier semaphore at k.cpp:12: "
                      "holds 1 of 2");
    CHECK(notes[1].starts_with("device 3 then waited"));
  }

  TEST_CASE("consequences: another failure is told by its place, first line and source line, and many are capped") {
    const SourceLoc loc(std::source_location::current());
    Consequences after;
    for (int d = 1; d <= 6; ++d)
      after.add("", runtime_error(fmt::format("the receiver's instance has already ended (device {})\n  fix: more", d), d, loc));
    after.add_text("process 1", "lost the connection");
    const std::vector<std::string> notes = after.notes();
    REQUIRE(notes.size() == Consequences::kShown + 1);
    CHECK(notes[0] == fmt::format("device 1, core 0 then failed: the receiver's instance has already ended (device 1) (at {})",
                                  loc.str()));
    CHECK(notes.back() == "and 3 more");  // 6 devices and the process: 7 lines, 4 shown
  }

  TEST_CASE("consequences: a long first line keeps its last clause that fits") {
    const std::string happened =
        "a remote semaphore_signal toward device 2 (i=2), whose instance of kernel `k` has already ended";
    Consequences after;
    after.add_text("device 1", happened + ": a device may only reach another while that one runs" + std::string(100, '.'));
    CHECK(after.notes() == std::vector<std::string>{"device 1 then failed: " + happened + " ..."});
  }

  TEST_CASE("consequences: the cause keeps its type, place, line, time and first line, and the notes follow it") {
    const SourceLoc loc(std::source_location::current());
    const RuntimeError cause("out-of-bounds slice", ExecutionPoint{2, 0, {1}, {}}, loc);
    Consequences after;
    after.add("device 1", runtime_error(deadlock_report(), 1, {}));
    try {
      rethrow_with_notes(std::make_exception_ptr(cause), after.notes());
      FAIL("rethrow_with_notes returned");
    } catch (const RuntimeError& e) {
      CHECK(e.problem() == "out-of-bounds slice");
      CHECK(e.where().device == 2);
      CHECK(e.loc() == loc);
      CHECK(e.sequence() == cause.sequence());
      REQUIRE(e.notes().size() == 2);
      const std::string what = e.what();
      CHECK(what.starts_with("out-of-bounds slice\n  where: device 2, core 0, grid point (1)\n  at:    "));
      CHECK(what.find("\n  note:  device 1 then waited for what never came: semaphore_wait") != std::string::npos);
      // Told again (a scope's prefix), the notes stay.
      const RuntimeError again = e.retold("shard_map: " + e.problem(), {"one more"});
      CHECK(again.notes().size() == 3);
      CHECK(std::string(again.what()).find("note:  one more") != std::string::npos);
    }
  }

  TEST_CASE("consequences: a cause that is not a RuntimeError is rethrown as it is") {
    try {
      rethrow_with_notes(std::make_exception_ptr(std::invalid_argument("bad")), {"a note"});
      FAIL("rethrow_with_notes returned");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()) == "bad");
    }
  }
}
