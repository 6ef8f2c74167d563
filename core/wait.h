// The one wait primitive of blocking calls on upgraded sockets: busy-poll for a short
// while, then sleep on a futex until a Signal moves.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ferry {

// Something that sleeps in the kernel on behalf of many Signals (an epoll set, a poll
// call): told about every bump of a Signal it was added to. wake() runs on the bumping
// thread, possibly with a Channel's lock held: it must not block or take locks.
struct Waiter {
  virtual void wake() noexcept = 0;
  // True while its owner sleeps (or is about to): then the Signal's changes must be
  // announced promptly rather than found by polling.
  virtual bool listening() const noexcept = 0;
  // Belongs to one thread's call (poll's per-thread waiter): a forked child, where that
  // thread does not exist, drops it.
  virtual bool per_thread() const noexcept { return false; }

 protected:
  ~Waiter() = default;
};

// A change counter that sleepers wait on. bump() costs one atomic add, plus a futex
// wake only when someone sleeps, plus a call per added Waiter.
struct Signal {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};

  uint32_t load() const { return seq.load(std::memory_order_seq_cst); }
  void bump() noexcept;

  // Once remove() returns, w is not called any more and may go away.
  void add(Waiter* w);
  void remove(Waiter* w) noexcept;
  // Someone sleeps on this signal: a blocked call, or a listening Waiter.
  bool wanted() noexcept;

  // Around fork (core/forking.cpp): the forking thread holds the waiter list's lock, so
  // the child's copy of the list is whole; in the child the lock is fresh, and the
  // sleepers and per-thread waiters (other threads') are gone.
  void lock_for_fork() noexcept { waiters_mu_.lock(); }
  void unlock_after_fork() noexcept { waiters_mu_.unlock(); }
  void after_fork_child() noexcept;

 private:
  std::atomic<uint32_t> waiter_count_{0};
  std::mutex waiters_mu_;
  std::vector<Waiter*> waiters_;
};

// CLOCK_MONOTONIC in microseconds.
int64_t now_us() noexcept;

// Time since the first reading, taken from the clock only when asked: a wait answered
// at its first look reads no clock at all (where the clock is a system call, as it is
// without a usable TSC, it would otherwise cost more than the look).
class Stopwatch {
 public:
  int64_t elapsed_us() noexcept {
    last_ = now_us();
    if (start_ < 0) start_ = last_;
    return last_ - start_;
  }
  int64_t last_us() const noexcept { return last_; }  // the latest reading

 private:
  int64_t start_ = -1, last_ = 0;
};

// How a waiter makes progress itself: `poll` is called while spinning, `prepare_sleep`
// once before sleeping (after the sleeper is counted); both may bump the signal. Either
// may be null.
struct Progress {
  bool (*poll)(void*) = nullptr;
  void (*prepare_sleep)(void*) = nullptr;
  void* arg = nullptr;
};

// Waits until `s` moves past `seen`: spins for spin_us, then sleeps. `timeout_us` 0 = no
// limit. Returns 0, -EAGAIN on timeout, or -EINTR when a signal handler ran (with no
// timeout, a handler with SA_RESTART restarts the wait inside the kernel, as it would
// restart recv()).
int wait_change(Signal& s, uint32_t seen, int64_t timeout_us, uint32_t spin_us, const Progress& p) noexcept;

}  // namespace ferry
