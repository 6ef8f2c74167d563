#include "core/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ferry {

void Lock::lock_contended(int seen) noexcept {
  // Whoever finds it held marks it waited before sleeping, so the holder's unlock wakes
  // a sleeper; a thread woken takes it as waited too, since others may still sleep.
  if (seen != kWaited) seen = state_.exchange(kWaited, std::memory_order_acquire);
  while (seen != kFree) {
    syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAIT_PRIVATE, kWaited, nullptr, nullptr, 0);
    seen = state_.exchange(kWaited, std::memory_order_acquire);
  }
}

void Lock::wake_one() noexcept {
  syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace ferry
