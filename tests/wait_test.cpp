#include "core/wait.h"

#include <gtest/gtest.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ferry {
namespace {

TEST(Wait, ReturnsAtOnceWhenAlreadyMoved) {
  Signal s;
  uint32_t seen = s.load();
  s.bump();
  EXPECT_EQ(wait_change(s, seen, 0, 0, {}), 0);
}

TEST(Wait, TimesOutWithEagain) {
  Signal s;
  EXPECT_EQ(wait_change(s, s.load(), 20000, 0, {}), -EAGAIN);
  EXPECT_EQ(s.sleepers.load(), 0u);
}

TEST(Wait, SleeperIsWokenByABump) {
  Signal s;
  uint32_t seen = s.load();
  std::thread t([&] {
    while (s.sleepers.load() == 0) std::this_thread::yield();
    s.bump();
  });
  EXPECT_EQ(wait_change(s, seen, 0, 0, {}), 0);
  t.join();
}

TEST(Wait, SpinningCallsThePollFunction) {
  Signal s;
  uint32_t seen = s.load();
  struct Arg {
    Signal* s;
    int calls = 0;
  } arg{&s};
  auto poll = [](void* p) {
    auto* a = static_cast<Arg*>(p);
    if (++a->calls == 3) a->s->bump();
    return true;
  };
  EXPECT_EQ(wait_change(s, seen, 0, 1000000, {poll, nullptr, &arg}), 0);
  EXPECT_EQ(arg.calls, 3);
}

void on_signal(int) {}

// Installs a SIGUSR1 handler with or without SA_RESTART and sends the signal to the
// waiting thread; returns the wait's result.
int interrupted_wait(bool restart, int64_t timeout_us) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGUSR1, &sa, nullptr);
  Signal s;
  uint32_t seen = s.load();
  std::atomic<int> result{1};
  std::thread waiter([&] { result = wait_change(s, seen, timeout_us, 0, {}); });
  while (s.sleepers.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pthread_kill(waiter.native_handle(), SIGUSR1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int before_bump = result.load();
  s.bump();
  waiter.join();
  signal(SIGUSR1, SIG_DFL);
  return before_bump == 1 ? result.load() + 1000 : before_bump;  // +1000: still waiting at the bump
}

TEST(Wait, SignalWithoutRestartInterrupts) { EXPECT_EQ(interrupted_wait(false, 0), -EINTR); }

TEST(Wait, SignalWithRestartKeepsWaitingLikeRecv) { EXPECT_EQ(interrupted_wait(true, 0), 1000); }

TEST(Wait, SignalWithATimeoutInterruptsEvenWithRestart) {
  // The kernel's rule for sockets with SO_RCVTIMEO: EINTR regardless of SA_RESTART.
  EXPECT_EQ(interrupted_wait(true, 5'000'000), -EINTR);
}

}  // namespace
}  // namespace ferry
