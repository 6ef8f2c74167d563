#include "core/base/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <unistd.h>

namespace ferry {

void Lock::lock_contended(uint32_t seen) noexcept {
  // Whoever finds it held marks it waited before sleeping, so the holder's unlock wakes
  // a sleeper; a thread that slept takes it as waited too, since others may still sleep.
  uint32_t take = word(kHeld);
  for (;;) {
    if (seen == kFree || stale(seen)) {
      if (state_.compare_exchange_weak(seen, take, std::memory_order_acquire, std::memory_order_relaxed)) return;
      continue;
    }
    if ((seen & kHow) != kWaited) {
      const uint32_t waited = (seen & ~uint32_t{kHow}) | kWaited;
      if (!state_.compare_exchange_weak(seen, waited, std::memory_order_relaxed, std::memory_order_relaxed))
        continue;
      seen = waited;
    }
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    take = word(kWaited);
    seen = state_.load(std::memory_order_relaxed);
  }
}

#if FERRY_CHECKS
const void* Lock::self() noexcept {
  static thread_local char me;
  return &me;
}

void Lock::not_the_holder() noexcept {
  static const char kWhy[] = "ferry: broken contract: a lock let go by a thread that does not hold it\n";
  (void)!write(2, kWhy, sizeof kWhy - 1);
  abort();
}
#endif

void Lock::wake_one() noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace ferry
