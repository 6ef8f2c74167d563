// How long a thread's next wait busy-polls before it sleeps, learnt from how its recent
// waits ended. Pure arithmetic: the wait loop (core/base/wait.h) feeds it what it saw.
//
// Spinning pays when the awaited event comes within the spin and the CPU spun on was
// wanted by nothing else; otherwise it only takes a CPU from what must run for the
// event to come (the peer's poller, the program's other threads, the device's own work
// where it is software). So:
//  - a thread that may run on one CPU only never spins;
//  - an event that came while the wait spun, or so soon after it slept that a spin
//    would have caught it (within half the setting's most), shows that spinning pays:
//    the budget is the whole of the setting again;
//  - a wait that slept kLongWaits times the setting's most or longer was a long one: the
//    budget halves (below kFloorUs: none). A sleep shorter than that says nothing
//    either way, since its wake-up alone may take longer than the spin (it does under
//    emulation). A thread with no budget left still spins once every kProbeEvery waits,
//    so that it finds out when spinning pays again;
//  - a spin that lost its CPU for a while (the clock jumped between two looks) shows
//    that something else wanted the CPU: the next waits do not spin, kHoldWaits of
//    them, twice as many after each further loss without a win between (up to
//    kMostHoldWaits).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ferry {

class SpinBudget {
 public:
  static constexpr uint32_t kFloorUs = 8;         // a budget below this is none
  static constexpr uint32_t kLongWaits = 10;      // a wait this many times the most is long
  static constexpr uint32_t kProbeEvery = 16;     // with no budget, every this many waits spin
  static constexpr uint32_t kHoldWaits = 32;      // waits without spinning after a lost CPU
  static constexpr uint32_t kMostHoldWaits = 1024;
  static constexpr int64_t kLostCpuUs = 500;      // a gap between two looks that means a lost CPU

  // The spin limit of the next wait, in microseconds, when the settings allow `most` and
  // the thread may run on `cpus` CPUs.
  uint32_t limit(uint32_t most, uint32_t cpus) noexcept {
    if (cpus < 2) return 0;
    if (hold_ > 0) {
      --hold_;
      return 0;
    }
    if (budget_ == 0) return ++probe_ % kProbeEvery == 0 ? most : 0;
    return std::min(budget_, most);
  }

  // The wait's event came while it spun.
  void found_spinning() noexcept {
    budget_ = UINT32_MAX;
    hold_len_ = kHoldWaits;
  }

  // The wait slept (after spinning, or without), and its event came `waited_us` after
  // it began.
  void after_sleep(int64_t waited_us, uint32_t most) noexcept {
    if (2 * waited_us <= most) {
      budget_ = UINT32_MAX;
    } else {
      timed_out(waited_us, most);
    }
  }
  // Nothing came by the wait's deadline, `waited_us` after it began.
  void timed_out(int64_t waited_us, uint32_t most) noexcept {
    if (waited_us < int64_t{kLongWaits} * most) return;
    budget_ = std::min(budget_, most) / 2;
    if (budget_ < kFloorUs) budget_ = 0;
  }

  // A look found that the clock moved by `gap_us` since the one before while spinning:
  // true when that means the thread lost its CPU (the wait should stop spinning).
  bool lost_cpu(int64_t gap_us) noexcept {
    if (gap_us < kLostCpuUs) return false;
    hold_ = hold_len_;
    hold_len_ = std::min(2 * hold_len_, kMostHoldWaits);
    return true;
  }

  // The budget as learnt (UINT32_MAX: the setting's most), for tests.
  uint32_t budget() const noexcept { return budget_; }

 private:
  uint32_t budget_ = UINT32_MAX;  // no lesson yet: the setting's most
  uint32_t hold_ = 0, hold_len_ = kHoldWaits;
  uint32_t probe_ = 0;
};

}  // namespace ferry
