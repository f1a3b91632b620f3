#include "runtime/schedule.h"

#include <algorithm>

namespace tessera::rt {

namespace {
// The generator's seed from the schedule's: neighbouring seeds (random_seed, random_seed + 1, ...)
// start far apart in mt19937_64's sequence.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

Schedule::Schedule(uint64_t seed, int64_t seats, std::mutex& mutex)
    : mutex_(mutex), rng_(mix(seed)), seats_(static_cast<size_t>(seats)), expected_(seats) {}

bool Schedule::runnable(const Seat& seat) const {
  switch (seat.state) {
    case State::arrived: return true;
    case State::blocked: return stuck_now_ || (*seat.done)();
    case State::expected:
    case State::left:
    case State::excused: return false;
  }
  return false;
}

void Schedule::pass() {
  std::vector<int64_t> candidates;
  for (size_t s = 0; s < seats_.size(); ++s)
    if (runnable(seats_[s])) candidates.push_back(static_cast<int64_t>(s));
  if (candidates.empty() && !stuck_now_ &&
      std::any_of(seats_.begin(), seats_.end(), [](const Seat& seat) { return seat.state == State::blocked; })) {
    // Nobody can run and somebody waits: nothing will ever change. The owner records why; then the
    // waiting seats run one at a time, in the seed's order, to fail with it.
    stuck_now_ = true;
    if (stuck_) stuck_();
    for (size_t s = 0; s < seats_.size(); ++s)
      if (seats_[s].state == State::blocked) candidates.push_back(static_cast<int64_t>(s));
  }
  // A draw only when there is a choice: the sequence of draws is part of what a seed replays.
  turn_ = candidates.empty() ? -1
          : candidates.size() == 1
              ? candidates[0]
              : candidates[static_cast<size_t>(rng_() % static_cast<uint64_t>(candidates.size()))];
  turn_changed_.notify_all();
}

void Schedule::wait_turn(std::unique_lock<std::mutex>& lock, int64_t s) {
  turn_changed_.wait(lock, [&] { return turn_ == s; });
}

void Schedule::arrive(int64_t s) {
  std::unique_lock lock(mutex_);
  seats_[static_cast<size_t>(s)].state = State::arrived;
  if (--expected_ == 0 && !started_) {
    started_ = true;
    pass();
  }
  wait_turn(lock, s);
}

void Schedule::excuse(int64_t s) {
  std::lock_guard lock(mutex_);
  excuse_locked(s);
}

void Schedule::excuse_locked(int64_t s) {
  Seat& seat = seats_[static_cast<size_t>(s)];
  if (seat.state != State::expected) return;
  seat.state = State::excused;
  if (--expected_ == 0 && !started_) {
    started_ = true;
    pass();
  }
  turn_changed_.notify_all();  // (wait_all_left)
}

void Schedule::point(int64_t s) {
  std::unique_lock lock(mutex_);
  if (turn_ != s) return;  // not a seat of this schedule's turns (cannot happen while it holds the baton)
  pass();
  wait_turn(lock, s);
}

void Schedule::block(std::unique_lock<std::mutex>& lock, int64_t s, const std::function<bool()>& done) {
  Seat& seat = seats_[static_cast<size_t>(s)];
  seat.state = State::blocked;
  seat.done = &done;
  pass();
  wait_turn(lock, s);
  seat.state = State::arrived;
  seat.done = nullptr;
}

void Schedule::leave(int64_t s, std::exception_ptr failure) {
  std::unique_lock lock(mutex_);
  if (failure && !first_failure_) {
    first_failure_ = std::move(failure);
    first_failed_seat_ = s;
  }
  seats_[static_cast<size_t>(s)].state = State::left;
  if (turn_ == s) pass();
  else turn_changed_.notify_all();  // (wait_all_left)
}

std::exception_ptr Schedule::wait_all_left() {
  std::unique_lock lock(mutex_);
  turn_changed_.wait(lock, [&] {
    return std::all_of(seats_.begin(), seats_.end(),
                       [](const Seat& seat) { return seat.state == State::left || seat.state == State::excused; });
  });
  return first_failure_;
}

}  // namespace tessera::rt
