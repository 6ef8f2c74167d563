#include "core/base/wait.h"

#include <gtest/gtest.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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
    int calls = 0, firsts = 0;
  } arg{&s};
  auto poll = [](void* p, bool first) {
    auto* a = static_cast<Arg*>(p);
    a->firsts += first;
    if (++a->calls == 3) a->s->bump();
    return true;
  };
  EXPECT_EQ(wait_change(s, seen, 0, 1000000, {poll, nullptr, &arg}), 0);
  EXPECT_EQ(arg.calls, 3);
  EXPECT_EQ(arg.firsts, 1);  // only the call's first look is the thorough one
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

// Steps for wait_loop that script what each look finds and count the calls.
struct Script {
  std::vector<int> looks;    // what successive looks find (then 0)
  std::vector<int> arms;     // what successive arms find (then 0)
  bool spin = false;
  bool ask = true;           // look_kernel's answer
  long sleep_result = 0;     // what a sleep (timeout != 0) returns
  int nlooks = 0, nfirsts = 0, narms = 0, ndisarms = 0, nasks = 0, nlooks_kernel = 0, nsleeps = 0;
  int64_t sleep_timeout = 0;

  int look(bool first) {
    nfirsts += first;
    return nlooks < static_cast<int>(looks.size()) ? looks[nlooks++] : (++nlooks, 0);
  }
  bool spins() const { return spin; }
  int arm() { return narms < static_cast<int>(arms.size()) ? arms[narms++] : (++narms, 0); }
  void disarm() { ++ndisarms; }
  bool look_kernel(int, Stopwatch&) {
    ++nasks;
    return ask;
  }
  long kernel(int, int64_t timeout_us, Stopwatch&) {
    if (timeout_us == 0) {
      ++nlooks_kernel;
      return 0;
    }
    ++nsleeps;
    sleep_timeout = timeout_us;
    return sleep_result;
  }
  long reap(int found, long k) { return found + k; }
};

TEST(WaitLoop, AnsweredAtTheFirstLook) {
  Script s;
  s.looks = {3};
  EXPECT_EQ(wait_loop(s, -1, 1000000), 3);
  EXPECT_EQ(s.nlooks, 1);
  EXPECT_EQ(s.narms, 0);
  EXPECT_EQ(s.nlooks_kernel, 1);  // the kernel's descriptors are merged
}

TEST(WaitLoop, ZeroTimeoutLooksOnceAtBoth) {
  Script s;
  s.spin = true;
  EXPECT_EQ(wait_loop(s, 0, 1000000), 0);
  EXPECT_EQ(s.nlooks, 1);
  EXPECT_EQ(s.narms, 0);
  EXPECT_EQ(s.nlooks_kernel, 1);
}

TEST(WaitLoop, NothingToSpinForSleepsAtOnce) {
  Script s;
  s.looks = {0, 2};
  EXPECT_EQ(wait_loop(s, -1, 1000000), 2);
  EXPECT_EQ(s.narms, 1);
  EXPECT_EQ(s.nsleeps, 1);
  EXPECT_EQ(s.sleep_timeout, -1);
  EXPECT_EQ(s.ndisarms, 1);
}

TEST(WaitLoop, TheLookAfterArmingClosesTheRace) {
  Script s;
  s.arms = {1};
  EXPECT_EQ(wait_loop(s, -1, 0), 1);
  EXPECT_EQ(s.nsleeps, 0);
  EXPECT_EQ(s.ndisarms, 1);
  EXPECT_EQ(s.nlooks_kernel, 1);  // a look, not a sleep
}

TEST(WaitLoop, ArmCanAskForAnotherLook) {
  Script s;
  s.looks = {0, 4};
  s.arms = {-1};
  EXPECT_EQ(wait_loop(s, -1, 0), 4);
  EXPECT_EQ(s.nlooks, 2);
  EXPECT_EQ(s.ndisarms, 1);
  EXPECT_EQ(s.nsleeps, 0);
}

TEST(WaitLoop, SpinAsksTheKernelEveryFewRounds) {
  Script s;
  s.looks.assign(40, 0);
  s.looks.push_back(1);
  s.spin = true;
  s.ask = false;
  EXPECT_EQ(wait_loop(s, -1, 60'000'000), 1);
  EXPECT_EQ(s.nlooks, 41);
  EXPECT_EQ(s.nfirsts, 1);  // the thorough look is the call's first, not every spin's
  EXPECT_EQ(s.narms, 0);
  EXPECT_EQ(s.nasks, 3 + 1);  // rounds 0, 16, 32, and the answer's round
}

TEST(WaitLoop, SleepErrorsAreReturned) {
  Script s;
  s.sleep_result = -EINTR;
  EXPECT_EQ(wait_loop(s, -1, 0), -EINTR);
  EXPECT_EQ(s.ndisarms, 1);
}

TEST(WaitLoop, DeadlineEndsSpinAndSleep) {
  Script s;
  s.spin = true;
  s.ask = false;
  const int64_t start = now_us();
  // The sleeps return at once: rounds until the deadline. 50 ms after 1 ms of spinning,
  // so that a thread the machine's load keeps off the CPU still gets to sleep.
  EXPECT_EQ(wait_loop(s, 50000, 1000), 0);
  EXPECT_GE(now_us() - start, 50000);
  EXPECT_GT(s.nsleeps, 0);
  EXPECT_EQ(s.ndisarms, s.narms);
}

}  // namespace
}  // namespace ferry
