// The consequences of a first failure: told as short notes after it, deduplicated and capped, and
// the failure itself (type, place, line, time, first line) unchanged.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <exception>
#include <memory>
#include <source_location>
#include <stdexcept>

#include "jit/ir/diagnostics.h"
#include "runtime/consequences.h"

using namespace tessera;
using namespace tessera::rt;

namespace {

std::exception_ptr runtime_error(const std::string& what, int device, SourceLoc loc) {
  return std::make_exception_ptr(RuntimeError(what, ExecutionPoint{device, 0, {}, {}}, loc));
}

// A deadlock as LaunchGroup finds it: device 1 and 3 wait, device 2 stopped. `text` is its report
// (only words: the waits are read from the data).
std::exception_ptr deadlock_error(int device, const std::string& text = "") {
  const std::string on = "semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2";
  auto deadlock = std::make_shared<Deadlock>(Deadlock{{{"device 1", on}, {"device 3", on}}});
  const std::string report = !text.empty() ? text
                                           : std::string(kDeadlockReport) +
                                                 " in shard_map; every participant waits or is done:\n"
                                                 "    device 0: finished the kernel\n"
                                                 "    device 1: " + on + "\n"
                                                 "    device 2: stopped before launching it (its function threw)\n"
                                                 "    device 3: " + on + "\n"
                                                 "  fix: every wait needs a matching copy or signal";
  return std::make_exception_ptr(RuntimeError(report, ExecutionPoint{device, 0, {}, {}}, SourceLoc{}, deadlock));
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("consequences: a deadlock report becomes one note per blocked participant, said once") {
    Consequences after;
    // Every waiter throws the same report: its waits are told once.
    after.add("device 1", deadlock_error(1));
    after.add("device 3", deadlock_error(3));
    const std::vector<std::string> notes = after.notes();
    REQUIRE(notes.size() == 2);
    CHECK(notes[0] == "device 1 then waited for what never came: semaphore_wait on the barrier semaphore at k.cpp:12: "
                      "holds 1 of 2");
    CHECK(notes[1].starts_with("device 3 then waited"));
  }

  TEST_CASE("consequences: whether a failure is a deadlock is its data, not its words") {
    // Reworded, a deadlock report is still one; a failure of its own that starts like one is not.
    Consequences after;
    after.add("device 1", deadlock_error(1, "every participant is stuck\n    device 1: reworded"));
    after.add("device 2", runtime_error(std::string(kDeadlockReport) + " (quoted)\n    device 0: waits", 2, {}));
    CHECK(after.notes() ==
          std::vector<std::string>{
              "device 1 then waited for what never came: semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2",
              "device 3 then waited for what never came: semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2",
              fmt::format("device 2 then failed: {} (quoted)", kDeadlockReport)});
    CHECK(is_deadlock(deadlock_error(1, "reworded")));
    CHECK_FALSE(is_deadlock(runtime_error(std::string(kDeadlockReport), 2, {})));
    CHECK_FALSE(is_deadlock(std::make_exception_ptr(std::runtime_error("deadlock"))));
    CHECK_FALSE(is_deadlock(nullptr));
    // Told again (a scope's prefix), a deadlock stays one.
    try {
      std::rethrow_exception(deadlock_error(1));
    } catch (const RuntimeError& e) {
      CHECK(e.retold("mpmd_map: " + e.problem()).deadlock() == e.deadlock());
    }
  }

  TEST_CASE("consequences: a failure crosses between processes with its kind, place, line, notes and waits") {
    // Framing characters in the texts are only text.
    const std::string message = "2:x: a message\nwith 12:lines";
    const std::optional<SentFailure> own = decode_failure(encode_failure(runtime_error(message, 1, {})));
    REQUIRE(own);
    CHECK(own->message == message);
    REQUIRE(own->where);
    CHECK(own->where->str() == "device 1, core 0");
    CHECK_FALSE(own->loc.known());
    CHECK_FALSE(own->deadlock);
    // The execution point and the user's line survive, and the file name outlives the message (odd
    // characters included).
    {
      std::string file = "dir with space/1:k\n,é.cpp";
      const RuntimeError sent("out of bounds", ExecutionPoint{3, 1, {2, 0, 5}, {1, 4}}, SourceLoc{});
      SourceLoc loc;
      loc.file = file.c_str();
      loc.line = 42;
      loc.column = 7;
      std::string encoded = encode_failure(std::make_exception_ptr(
          RuntimeError(sent.problem(), sent.where(), loc).retold("out of bounds", {"device 2 then failed: x"})));
      file.assign(file.size(), '?');
      const std::optional<SentFailure> placed = decode_failure(encoded);
      encoded.assign(encoded.size(), '?');
      REQUIRE(placed);
      REQUIRE(placed->where);
      CHECK(placed->where->device == 3);
      CHECK(placed->where->core == 1);
      CHECK(placed->where->grid_point == std::vector<int64_t>{2, 0, 5});
      CHECK(placed->where->inner_point == std::vector<int64_t>{1, 4});
      CHECK(placed->loc.str() == "dir with space/1:k\n,é.cpp:42");
      CHECK(placed->loc.column == 7);
      CHECK(placed->notes == std::vector<std::string>{"device 2 then failed: x"});
      CHECK(placed->message == "out of bounds");
    }
    const std::optional<SentFailure> deadlock = decode_failure(encode_failure(deadlock_error(3, "reworded: 1:")));
    REQUIRE(deadlock);
    REQUIRE(deadlock->deadlock);
    CHECK(deadlock->deadlock->waits.size() == 2);
    CHECK(deadlock->deadlock->waits[1] ==
          Deadlock::Wait{"device 3", "semaphore_wait on the barrier semaphore at k.cpp:12: holds 1 of 2"});
    CHECK(deadlock->message == "reworded: 1:");
    REQUIRE(deadlock->where);
    CHECK(deadlock->where->device == 3);
    const std::optional<SentFailure> other = decode_failure(encode_failure(std::make_exception_ptr(std::runtime_error("lost"))));
    REQUIRE(other);
    CHECK(other->message == "lost");
    CHECK_FALSE(other->where);
    CHECK_FALSE(other->loc.known());
    CHECK_FALSE(decode_failure(encode_failure(nullptr)));
    CHECK_THROWS_AS(decode_failure("D12:short"), InternalError);
    CHECK_THROWS_AS(decode_failure("E4:lost1:x1:0"), InternalError);  // a count that is no number
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
    after.add("device 1", deadlock_error(1));
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
