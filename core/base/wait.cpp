#include "core/base/wait.h"

#include "core/base/config.h"

#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <new>

namespace ferry {
int64_t now_us() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

namespace {
// The thread's lessons, and the CPUs it may run on as of its last look at them.
struct ThreadSpin {
  SpinBudget budget;
  uint32_t cpus = 0;
  int64_t cpus_seen_us = INT64_MIN / 2;
};
thread_local ThreadSpin t_spin;

uint32_t allowed_cpus() noexcept {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 2;  // unknown: as if there were a spare
  return static_cast<uint32_t>(CPU_COUNT(&set));
}
}  // namespace

SpinBudget* spin_budget() noexcept { return config().poll_adapt ? &t_spin.budget : nullptr; }

int64_t spin_limit_of(SpinBudget& budget, int64_t most, Stopwatch& clock) noexcept {
  const int64_t now = clock.now();
  if (now - t_spin.cpus_seen_us >= 1000000) {
    t_spin.cpus = allowed_cpus();
    t_spin.cpus_seen_us = now;
  }
  return budget.limit(static_cast<uint32_t>(most), t_spin.cpus);
}

namespace {
uint32_t* word(Signal& s) { return reinterpret_cast<uint32_t*>(&s.seq); }
}  // namespace

void Signal::bump() noexcept {
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) > 0)
    syscall(SYS_futex, word(*this), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  if (waiter_count_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(waiters_mu_);
    for (Waiter* w : waiters_) w->wake();
  }
}

bool Signal::wanted() noexcept {
  if (sleepers.load(std::memory_order_seq_cst) > 0) return true;
  if (waiter_count_.load(std::memory_order_seq_cst) == 0) return false;
  std::lock_guard<std::mutex> lock(waiters_mu_);
  for (Waiter* w : waiters_)
    if (w->listening()) return true;
  return false;
}

void Signal::add(Waiter* w) {
  std::lock_guard<std::mutex> lock(waiters_mu_);
  waiters_.push_back(w);
  waiter_count_.store(static_cast<uint32_t>(waiters_.size()), std::memory_order_seq_cst);
}

void Signal::remove(Waiter* w) noexcept {
  std::lock_guard<std::mutex> lock(waiters_mu_);
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (waiters_[i] != w) continue;
    waiters_[i] = waiters_.back();
    waiters_.pop_back();
    break;
  }
  waiter_count_.store(static_cast<uint32_t>(waiters_.size()), std::memory_order_seq_cst);
}

void Signal::after_fork_child() noexcept {
  new (&waiters_mu_) std::mutex;
  sleepers.store(0);
  std::erase_if(waiters_, [](Waiter* w) { return w->per_thread(); });
  waiter_count_.store(static_cast<uint32_t>(waiters_.size()));
}

namespace {

// wait_loop's steps for one Signal: the look is the sequence number (and the caller's
// progress while spinning), the arm counts a sleeper, the kernel's call is the futex.
struct SignalSteps {
  Signal& s;
  const uint32_t seen;
  const Progress& p;
  const bool spin;

  int look(bool first) noexcept {
    if (s.load() != seen) return 1;  // woken: no poll needed to know
    if (!p.poll) return 0;
    p.poll(p.arg, first);
    return s.load() != seen;
  }
  bool spins() const noexcept { return spin; }
  int arm() noexcept {
    s.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (p.prepare_sleep) p.prepare_sleep(p.arg);
    return s.load() != seen;
  }
  void disarm() noexcept { s.sleepers.fetch_sub(1, std::memory_order_seq_cst); }
  bool look_kernel(int, Stopwatch&) const noexcept { return false; }  // nothing there but the futex
  long kernel(int, int64_t timeout_us, Stopwatch&) noexcept {
    timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
    long r = syscall(SYS_futex, word(s), FUTEX_WAIT_PRIVATE, seen, timeout_us > 0 ? &ts : nullptr, nullptr, 0);
    // Woken, already moved, or timed out: the next round looks (and reads the clock).
    return r != 0 && errno == EINTR ? -EINTR : 0;
  }
  long reap(int found, long) const noexcept { return found; }
};

}  // namespace

int wait_change(Signal& s, uint32_t seen, int64_t timeout_us, uint32_t spin_us, const Progress& p) noexcept {
  SignalSteps steps{s, seen, p, spin_us > 0};
  const long r = wait_loop(steps, timeout_us > 0 ? timeout_us : -1, spin_us, spin_budget());
  return r > 0 ? 0 : r == 0 ? -EAGAIN : static_cast<int>(r);
}

}  // namespace ferry
