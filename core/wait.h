// The one wait primitive of blocking calls on upgraded sockets: busy-poll for a short
// while, then sleep on a futex until a Signal moves.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry {

// A change counter that sleepers wait on. bump() costs one atomic add, plus a futex
// wake only when someone sleeps.
struct Signal {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};

  uint32_t load() const { return seq.load(std::memory_order_seq_cst); }
  void bump() noexcept;
};

// Waits until `s` moves past `seen`. `poll` (may be null) is called while spinning and
// may itself bump s. `timeout_us` 0 = no limit. Returns 0, -EAGAIN on timeout, or
// -EINTR when a signal handler ran (with no timeout, a handler with SA_RESTART restarts
// the wait inside the kernel, as it would restart recv()).
int wait_change(Signal& s, uint32_t seen, int64_t timeout_us, uint32_t spin_us, bool (*poll)(void*),
                void* arg) noexcept;

}  // namespace ferry
