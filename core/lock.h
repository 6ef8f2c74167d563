// The mutex of the data path (a connection's channel, a socket's send and receive
// sides). Uncontended, taking and releasing it is one atomic instruction each, inline;
// std::mutex costs two calls into pthread around the same work, and on the hot path of
// an RDMA ring every instruction counts. Contended, waiters sleep on a futex.
#pragma once

#include <atomic>

namespace ferry {

class Lock {
 public:
  Lock() = default;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  void lock() noexcept {
    int c = kFree;
    if (!state_.compare_exchange_strong(c, kHeld, std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended(c);
  }
  bool try_lock() noexcept {
    int c = kFree;
    return state_.compare_exchange_strong(c, kHeld, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kWaited) wake_one();
  }
  // In a forked child, whose other threads are gone: free, whoever held it. Writes
  // only a lock that is held (a write to a page shared with the parent copies it).
  void reset_after_fork() noexcept {
    if (state_.load(std::memory_order_relaxed) != kFree) state_.store(kFree, std::memory_order_relaxed);
  }

 private:
  enum : int { kFree = 0, kHeld = 1, kWaited = 2 };  // kWaited: held, and someone may sleep
  void lock_contended(int seen) noexcept;
  void wake_one() noexcept;
  std::atomic<int> state_{kFree};
};

}  // namespace ferry
