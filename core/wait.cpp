#include "core/wait.h"

#include <errno.h>
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

int wait_change(Signal& s, uint32_t seen, int64_t timeout_us, uint32_t spin_us, const Progress& p) noexcept {
  // The clock is read once every few rounds, the first time after a few: the sooner a
  // round comes back to poll, the sooner a landing is seen.
  Stopwatch clock;
  for (uint32_t round = 1; spin_us > 0; ++round) {
    if (p.poll) p.poll(p.arg);
    if (s.load() != seen) return 0;
    if (round % 8 == 0 && clock.elapsed_us() >= spin_us) break;
  }
  int result = 0;
  s.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (p.prepare_sleep) p.prepare_sleep(p.arg);
  for (;;) {
    if (s.load() != seen) break;
    timespec ts, *tsp = nullptr;
    if (timeout_us > 0) {
      int64_t left = timeout_us - clock.elapsed_us();
      if (left <= 0) {
        result = -EAGAIN;
        break;
      }
      ts.tv_sec = left / 1000000;
      ts.tv_nsec = (left % 1000000) * 1000;
      tsp = &ts;
    }
    long r = syscall(SYS_futex, word(s), FUTEX_WAIT_PRIVATE, seen, tsp, nullptr, 0);
    if (r == 0 || errno == EAGAIN) continue;  // woken, or it had already moved: re-check
    if (errno == ETIMEDOUT) {
      result = -EAGAIN;
      break;
    }
    if (errno == EINTR) {
      result = -EINTR;
      break;
    }
  }
  s.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  return result;
}

}  // namespace ferry
