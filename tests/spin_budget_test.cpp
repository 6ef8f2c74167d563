#include "core/base/spin_budget.h"
#include "core/base/wait.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <vector>

namespace ferry {
namespace {

constexpr uint32_t kMost = 1000;

TEST(SpinBudget, StartsAtTheSettingsMost) {
  SpinBudget b;
  EXPECT_EQ(b.limit(kMost, 2), kMost);
  EXPECT_EQ(b.limit(50, 8), 50u);
}

TEST(SpinBudget, OneCpuNeverSpins) {
  SpinBudget b;
  EXPECT_EQ(b.limit(kMost, 1), 0u);
  EXPECT_EQ(b.limit(kMost, 0), 0u);
}

// Waits at least kLongWaits times the most: spinning them was in vain.
void long_waits(SpinBudget& b, int n) {
  for (int i = 0; i < n; ++i) b.after_sleep(int64_t{SpinBudget::kLongWaits} * kMost, kMost);
}

TEST(SpinBudget, LongWaitsHalveItToNothing) {
  SpinBudget b;
  long_waits(b, 1);
  EXPECT_EQ(b.limit(kMost, 2), 500u);
  long_waits(b, 1);
  EXPECT_EQ(b.limit(kMost, 2), 250u);
  long_waits(b, 10);
  EXPECT_EQ(b.budget(), 0u);  // below the floor: none
}

TEST(SpinBudget, ASleepBetweenTheSpinAndALongWaitSaysNothing) {
  SpinBudget b;
  long_waits(b, 1);
  b.after_sleep(3 * kMost, kMost);  // under emulation a wake-up alone takes this long
  EXPECT_EQ(b.limit(kMost, 2), 500u);
  b.timed_out(5 * kMost, kMost);
  EXPECT_EQ(b.limit(kMost, 2), 500u);
  b.timed_out(SpinBudget::kLongWaits * kMost, kMost);
  EXPECT_EQ(b.limit(kMost, 2), 250u);
}

TEST(SpinBudget, AShortSleepOrAWinBringsTheWholeSpinBack) {
  SpinBudget b;
  long_waits(b, 20);
  ASSERT_EQ(b.budget(), 0u);
  b.after_sleep(kMost / 2, kMost);  // a spin of the most would have caught it
  EXPECT_EQ(b.limit(kMost, 2), kMost);
  long_waits(b, 20);
  b.found_spinning();
  EXPECT_EQ(b.limit(kMost, 2), kMost);
}

TEST(SpinBudget, WithNoBudgetEverySixteenthWaitProbes) {
  SpinBudget b;
  long_waits(b, 20);
  int spun = 0;
  for (uint32_t i = 0; i < 4 * SpinBudget::kProbeEvery; ++i) spun += b.limit(kMost, 2) == kMost;
  EXPECT_EQ(spun, 4);
}

TEST(SpinBudget, ALostCpuHoldsSpinningBackLongerEachTime) {
  SpinBudget b;
  EXPECT_FALSE(b.lost_cpu(SpinBudget::kLostCpuUs - 1));
  EXPECT_EQ(b.limit(kMost, 2), kMost);
  auto held = [&] {
    uint32_t n = 0;
    while (b.limit(kMost, 2) == 0) ++n;
    return n;
  };
  EXPECT_TRUE(b.lost_cpu(SpinBudget::kLostCpuUs));
  EXPECT_EQ(held(), SpinBudget::kHoldWaits);
  EXPECT_TRUE(b.lost_cpu(SpinBudget::kLostCpuUs));
  EXPECT_EQ(held(), 2 * SpinBudget::kHoldWaits);
  b.found_spinning();  // a win: the next loss holds it back the least again
  EXPECT_TRUE(b.lost_cpu(SpinBudget::kLostCpuUs));
  EXPECT_EQ(held(), SpinBudget::kHoldWaits);
  for (int i = 0; i < 20; ++i) b.lost_cpu(SpinBudget::kLostCpuUs);
  EXPECT_EQ(held(), SpinBudget::kMostHoldWaits);
}

// wait_loop with a budget: scripted looks, sleeps that return at once.
struct Steps {
  int found_at = -1;  // the look that finds something (-1: none)
  bool spin = true;
  int nlooks = 0, nsleeps = 0;
  int look(bool) { return nlooks++ == found_at ? 1 : 0; }
  bool spins() const { return spin; }
  int arm() { return 0; }
  void disarm() {}
  bool look_kernel(int, Stopwatch&) { return false; }
  long kernel(int, int64_t timeout_us, Stopwatch&) {
    if (timeout_us != 0) ++nsleeps;
    return 0;
  }
  long reap(int found, long k) { return found + k; }
};

uint32_t cpus() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 2;
}

TEST(WaitLoopBudget, NoBudgetLeftSleepsAtTheFirstEmptyLook) {
  SpinBudget b;
  long_waits(b, 20);
  Steps s;
  s.found_at = 1;  // the look after the first sleep
  EXPECT_EQ(wait_loop(s, -1, kMost, &b), 1);
  EXPECT_EQ(s.nsleeps, 1);
  EXPECT_EQ(s.nlooks, 2);
}

TEST(WaitLoopBudget, ALongDeadlineTeachesNotToSpin) {
  SpinBudget b;
  Steps s;
  EXPECT_EQ(wait_loop(s, 20'000, kMost, &b), 0);
  EXPECT_EQ(b.budget(), kMost / 2);
}

TEST(WaitLoopBudget, AnAnswerAtTheFirstLookTeachesNothing) {
  SpinBudget b;
  long_waits(b, 1);
  Steps s;
  s.found_at = 0;
  EXPECT_EQ(wait_loop(s, -1, kMost, &b), 1);
  EXPECT_EQ(b.budget(), kMost / 2);
}

TEST(WaitLoopBudget, AnEventFoundSpinningBringsTheWholeSpinBack) {
  if (cpus() < 2) GTEST_SKIP() << "one CPU: nothing spins";
  SpinBudget b;
  long_waits(b, 1);
  Steps s;
  s.found_at = 3;  // three rounds of a spin that may last 60 s: found spinning
  EXPECT_EQ(wait_loop(s, -1, 60'000'000, &b), 1);
  EXPECT_EQ(s.nsleeps, 0);
  EXPECT_EQ(b.budget(), UINT32_MAX);
}

// A look that takes the CPU away for longer than a spin may be off it.
struct Preempted : Steps {
  int look(bool first) {
    if (nlooks == 8) usleep(2 * SpinBudget::kLostCpuUs);
    return Steps::look(first);
  }
};

TEST(WaitLoopBudget, ASpinThatLosesItsCpuSleeps) {
  if (cpus() < 2) GTEST_SKIP() << "one CPU: nothing spins";
  SpinBudget b;
  Preempted s;
  s.found_at = 1000;
  // Without the lost CPU it would spin for a minute before its first sleep.
  EXPECT_EQ(wait_loop(s, -1, 60'000'000, &b), 1);
  EXPECT_EQ(s.nsleeps, s.found_at - 8);  // the lost round and each later one sleep (at once, here)
  EXPECT_EQ(b.limit(kMost, 2), 0u);  // held back
}

}  // namespace
}  // namespace ferry
