// Waiting: the Signal that blocked calls and Waiters wait on, and the one wait loop
// (wait_loop) that blocking calls, poll/select and epoll share.
#pragma once

#include "core/base/fork_path.h"
#include "core/base/spin_budget.h"
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

  // Around fork (core/process/forking.cpp): the forking thread holds the waiter list's lock, so
  // the child's copy of the list is whole; in the child the lock is fresh, and the
  // sleepers and per-thread waiters (other threads') are gone.
  void lock_for_fork() noexcept { waiters_mu_.lock(); }
  void unlock_after_fork() noexcept { waiters_mu_.unlock(); }
  FERRY_FORK_PATH void after_fork_child() noexcept;

 private:
  std::atomic<uint32_t> waiter_count_{0};
  std::mutex waiters_mu_;
  std::vector<Waiter*> waiters_;
};

// CLOCK_MONOTONIC in microseconds.
int64_t now_us() noexcept;

// Time since the first reading, taken from the clock only when asked, at most once a
// round of a wait: a wait answered at its first look reads no clock at all (where the
// clock is a system call, as it is without a usable TSC, it would otherwise cost more
// than the look).
class Stopwatch {
 public:
  // A new round: the next reading asks the clock again.
  void next_round() noexcept { fresh_ = false; }
  // This round's reading, taken at the first call of the round.
  int64_t now() noexcept {
    if (!fresh_) {
      last_ = now_us();
      if (start_ < 0) start_ = last_;
      fresh_ = true;
    }
    return last_;
  }
  int64_t elapsed_us() noexcept { return now() - start_; }

 private:
  int64_t start_ = -1, last_ = 0;
  bool fresh_ = false;
};

// While spinning, the clock is read once every kClockEvery rounds (the sooner a round
// comes back to look, the sooner a landing is seen) and the kernel is asked once every
// kKernelEvery rounds; a kernel look always falls on a round that read the clock.
constexpr uint32_t kClockEvery = 8;
constexpr uint32_t kKernelEvery = 16;
static_assert(kKernelEvery % kClockEvery == 0);

// The calling thread's SpinBudget, or null when FERRY_POLL_ADAPT=0 (every wait spins
// for the whole of FERRY_POLL_US).
SpinBudget* spin_budget() noexcept;
// How long this wait spins at most, of `most`, by `budget` and the CPUs the thread may
// run on (asked of the kernel at most once a second per thread, on a wait that spins).
int64_t spin_limit_of(SpinBudget& budget, int64_t most, Stopwatch& clock) noexcept;

// The one wait loop: blocking calls on an upgraded connection (a futex on its Signal),
// poll/select and epoll (the kernel's call beside a Kicker) all wait here. It owns the
// policy: look; if nothing, spin for spin_us while something in user space can turn
// up; then arm, look once more (whatever changes after arming wakes the sleep), sleep
// in the kernel until woken, a signal or the deadline, disarm; loop. The caller's
// steps only say how:
//   int look(bool first)  looks in user space: the results found (0: none). The
//                    call's first look (first) is thorough: whatever reached this end
//                    before the call (the peer's control messages too) is in its answer,
//                    as the kernel's would be; later looks may be cheaper.
//   bool spins()     something in user space can turn up (an upgraded member), as of
//                    the last look: spinning may find it
//   int arm()        arms the wakeup and looks once more: the results found, 0 (then
//                    the loop sleeps) or -1: look again from the top
//   void disarm()    after a sleep, or after arm() found something
//   bool look_kernel(int found, Stopwatch&)  whether a look that does not sleep asks
//                    the kernel too (the loop asks it before every sleep)
//   long kernel(int found, int64_t timeout_us, Stopwatch&)  the kernel's call, before
//                    disarming: a look (timeout 0) or a sleep (< 0: no limit); its
//                    count or -errno (a signal's EINTR)
//   long reap(int found, long k)  after disarming: the total results of the round
// timeout_us < 0 waits forever. Returns the results (0: the deadline passed) or
// -errno from the kernel's call when user space found nothing.
//
// With a SpinBudget (the calling thread's, spin_budget()), spin_us is the most a wait
// spins: the budget says how much of it this wait spins, and learns from how the wait
// ended (core/base/spin_budget.h). A wait answered at its first look teaches nothing
// and costs nothing more.
template <class Steps>
long wait_loop(Steps& steps, int64_t timeout_us, int64_t spin_us, SpinBudget* budget = nullptr) noexcept {
  Stopwatch clock;
  int64_t elapsed = 0;       // as of the latest reading
  int64_t spin_limit = -1;   // this wait's, decided when it first could spin
  bool slept = false;
  // What the wait taught the budget, once it could spin: whether its event came
  // (else its deadline passed), and how long that took.
  auto learn = [&](bool found) noexcept {
    if (spin_limit < 0 || budget == nullptr) return;
    if (found && !slept) {
      if (spin_limit > 0) budget->found_spinning();
      return;
    }
    clock.next_round();
    const int64_t waited = clock.elapsed_us();
    if (found) {
      budget->after_sleep(waited, static_cast<uint32_t>(spin_us));
    } else {
      budget->timed_out(waited, static_cast<uint32_t>(spin_us));
    }
  };
  for (uint32_t round = 0;; ++round) {
    clock.next_round();
    int found = steps.look(round == 0);
    int64_t left = timeout_us;
    bool spinning = false;
    if (found == 0 && timeout_us != 0) {
      if (spin_limit < 0 && steps.spins()) spin_limit = budget ? spin_limit_of(*budget, spin_us, clock) : spin_us;
      spinning = steps.spins() && elapsed < spin_limit;
      if ((timeout_us > 0 && !spinning) || (spinning && round % kClockEvery == 0)) {
        const int64_t before = elapsed;
        elapsed = clock.elapsed_us();
        // Between two readings of one spin, the clock should move by a few looks' worth.
        if (spinning && budget && round > 0 && budget->lost_cpu(elapsed - before)) spin_limit = 0;
      }
      if (timeout_us > 0) left = elapsed < timeout_us ? timeout_us - elapsed : 0;
      spinning = spinning && elapsed < spin_limit && left != 0;
    }
    bool sleep = found == 0 && left != 0 && !spinning;
    if (sleep) {
      const int again = steps.arm();  // from here on, every change wakes the sleep
      if (again != 0) {
        steps.disarm();
        sleep = false;
        if (again < 0) continue;
        found = again;
      }
    } else if (spinning && round % kKernelEvery != 0) {
      continue;
    }
    long total = found;
    if (sleep || steps.look_kernel(found, clock)) {
      const long k = steps.kernel(found, sleep ? left : 0, clock);
      if (sleep) {
        steps.disarm();
        slept = true;
      }
      if (k < 0) return found > 0 ? (learn(true), found) : k;
      total = steps.reap(found, k);
    }
    if (total > 0) {
      learn(true);
      return total;
    }
    if (left == 0) {
      learn(false);
      return 0;
    }
  }
}

// How a waiter on a Signal makes progress itself: `poll` is called at the first look
// (first: thorough, see wait_loop's look) and while spinning,
// `prepare_sleep` once before each sleep (after the sleeper is counted); both may bump
// the signal. Either may be null.
struct Progress {
  bool (*poll)(void*, bool first) = nullptr;
  void (*prepare_sleep)(void*) = nullptr;
  void* arg = nullptr;
};

// Waits in wait_loop until `s` moves past `seen`, spinning for spin_us, sleeping on the
// futex. `timeout_us` 0 = no limit. Returns 0, -EAGAIN on timeout, or -EINTR when a
// signal handler ran (with no timeout, a handler with SA_RESTART restarts the wait
// inside the kernel, as it would restart recv()).
int wait_change(Signal& s, uint32_t seen, int64_t timeout_us, uint32_t spin_us, const Progress& p) noexcept;

}  // namespace ferry
