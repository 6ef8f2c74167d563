// The mutex of the data path (a connection's channel, a socket's send and receive
// sides). Uncontended, taking and releasing it is one atomic instruction each, inline;
// std::mutex costs two calls into pthread around the same work, and on the hot path of
// an RDMA ring every instruction counts. Contended, waiters sleep on a futex.
//
// A holder stamps the lock with its process's fork generation (core/base/generation.h). In
// a forked child, where only the forking thread lives on, a lock stamped by an older
// generation was held by a thread that is not there: it counts as free. So a child
// inherits no held lock, and its fork handler need not find and reset them.
//
// While a thread holds one, signals that come to it wait until it holds none
// (core/base/deferral.h): a handler that never returns cannot leave it held.
//
// Built with FERRY_CHECKS, it also knows which thread holds it (held_here), for
// FERRY_HELD (core/base/contract.h).
#pragma once

#include "core/base/deferral.h"
#include "core/base/generation.h"

#include <atomic>
#include <cstdint>

namespace ferry {

class Lock {
 public:
  Lock() = default;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  void lock() noexcept {
    deferral::enter();
    uint32_t c = kFree;
    if (!state_.compare_exchange_strong(c, word(kHeld), std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended(c);
    note_holder();
  }
  bool try_lock() noexcept {
    deferral::enter();
    uint32_t c = kFree;
    if (state_.compare_exchange_strong(c, word(kHeld), std::memory_order_acquire, std::memory_order_relaxed) ||
        (stale(c) &&
         state_.compare_exchange_strong(c, word(kHeld), std::memory_order_acquire, std::memory_order_relaxed))) {
      note_holder();
      return true;
    }
    deferral::leave();
    return false;
  }
  // By the thread that holds it (each thread counts its own locks).
  void unlock() noexcept {
    forget_holder();
    if ((state_.exchange(kFree, std::memory_order_release) & kHow) == kWaited) wake_one();
    deferral::leave();
  }
#if FERRY_CHECKS
  // Whether the calling thread holds it (FERRY_HELD, core/base/contract.h).
  bool held_here() const noexcept {
    const uint32_t s = state_.load(std::memory_order_relaxed);
    return s != kFree && !stale(s) && holder_.load(std::memory_order_relaxed) == self();
  }
#endif

 private:
  // The low two bits say how it is held; the rest is the holder's generation.
  enum : uint32_t { kFree = 0, kHeld = 1, kWaited = 2, kHow = 3 };  // kWaited: held, and someone may sleep
  static uint32_t word(uint32_t how) noexcept { return forking::generation() << 2 | how; }
  // Held by a thread of an ancestor process: by nobody here.
  static bool stale(uint32_t seen) noexcept { return seen != kFree && (seen >> 2) != (word(0) >> 2); }
  void lock_contended(uint32_t seen) noexcept;
  void wake_one() noexcept;
  std::atomic<uint32_t> state_{kFree};
#if FERRY_CHECKS
  // Who holds it: a thread's identity is the address of a thread-local of its own.
  static const void* self() noexcept;
  void note_holder() noexcept { holder_.store(self(), std::memory_order_relaxed); }
  void forget_holder() noexcept {
    if (holder_.exchange(nullptr, std::memory_order_relaxed) != self()) not_the_holder();
  }
  // Aborts: the thread that let go of it does not hold it (its count of locks,
  // core/base/deferral.h, would be wrong).
  [[noreturn]] static void not_the_holder() noexcept;
  std::atomic<const void*> holder_{nullptr};
#else
  void note_holder() noexcept {}
  void forget_holder() noexcept {}
#endif
};

}  // namespace ferry
