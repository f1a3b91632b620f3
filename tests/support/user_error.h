// Checks a UserError part by part: what is wrong, what was given, how to fix it, and that it points
// at the caller's own file (the user's source line, not the library's).
#pragma once

#include <tessera/tessera.hpp>

#include <string>
#include <string_view>

#include <doctest/doctest.h>

namespace tessera::testing {

template <class F>
void check_user_error(F&& f, std::string_view problem, std::string_view given, std::string_view fix, std::string_view file) {
  try {
    f();
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    CHECK(e.problem() == problem);
    CHECK(e.given() == given);
    CHECK(e.fix() == fix);
    CHECK(std::string(e.loc().file).find(file) != std::string::npos);
  }
}

// Runs `f`, which must throw a UserError whose message holds `words` and which points at `line` of
// `file` (the statement of the user's that made the failing call).
template <class F>
void check_user_error_at(int line, std::string_view file, F&& f, std::string_view words) {
  try {
    f();
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find(words) != std::string::npos, "missing `" << words << "` in:\n" << what);
    CHECK_MESSAGE(e.loc().line == static_cast<uint32_t>(line), what);
    CHECK_MESSAGE(e.loc().str().find(file) != std::string::npos, what);
  }
}

}  // namespace tessera::testing
