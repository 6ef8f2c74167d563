#include "core/lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {
namespace {

TEST(Lock, TryLockFailsWhileHeldAndSucceedsAfter) {
  Lock l;
  ASSERT_TRUE(l.try_lock());
  EXPECT_FALSE(l.try_lock());
  std::thread other([&] { EXPECT_FALSE(l.try_lock()); });
  other.join();
  l.unlock();
  EXPECT_TRUE(l.try_lock());
  l.unlock();
}

// Threads that sleep on the lock while it is held are all let in, one at a time, and no
// update made under it is lost.
TEST(Lock, ContendedUpdatesAreNeitherLostNorConcurrent) {
  Lock l;
  long counter = 0;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<Lock> g(l);
        if (inside.fetch_add(1) != 0) overlap = true;
        ++counter;
        if (i % 1000 == 0) std::this_thread::yield();  // make others find it held and sleep
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, long{kThreads} * kRounds);
  EXPECT_FALSE(overlap.load());
  EXPECT_TRUE(l.try_lock());  // nobody left it held
  l.unlock();
}

// A holder that keeps it long enough for a waiter to sleep in the kernel wakes it on
// release.
TEST(Lock, SleeperIsWokenByUnlock) {
  Lock l;
  l.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    l.lock();
    got = true;
    l.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  l.unlock();
  waiter.join();
  EXPECT_TRUE(got.load());
}

}  // namespace
}  // namespace ferry
