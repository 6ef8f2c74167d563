#include "core/base/lock.h"

#include "core/process/forking.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
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

// A forked child has only the forking thread: a lock another thread of the parent held
// (with a sleeper queued behind it) is free there, for lock and for try_lock, and
// works as a lock afterwards. The parent's holder and sleeper are unaffected.
TEST(Lock, AForkedChildFindsFreeWhatTheParentsThreadsHeld) {
  forking::install();
  Lock a, b;
  std::promise<void> held, done;
  std::shared_future<void> go = done.get_future().share();
  std::thread holder([&] {
    std::lock_guard<Lock> ga(a);
    std::lock_guard<Lock> gb(b);
    held.set_value();
    go.wait();
  });
  held.get_future().wait();
  std::atomic<bool> sleeper_in{false};
  std::thread sleeper([&] {
    std::lock_guard<Lock> g(a);  // marks it waited, and sleeps
    sleeper_in = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(10);  // a lock that never comes fails the test
    bool ok = b.try_lock();
    a.lock();
    ok = ok && !a.try_lock() && !b.try_lock();
    a.unlock();
    b.unlock();
    ok = ok && a.try_lock() && b.try_lock();
    a.unlock();
    b.unlock();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  EXPECT_FALSE(b.try_lock());  // still the holder's here
  EXPECT_FALSE(sleeper_in.load());
  done.set_value();
  holder.join();
  sleeper.join();
  EXPECT_TRUE(sleeper_in.load());
  EXPECT_TRUE(a.try_lock() && b.try_lock());
  a.unlock();
  b.unlock();
}

}  // namespace
}  // namespace ferry
