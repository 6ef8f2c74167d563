// Thread contracts, by name suffix:
//   _st      runs on the poller thread only: FERRY_POLLER_ONLY() (core/conn/poller.h)
//   _locked  its caller holds the lock its comment names: FERRY_HELD(lock)
// Builds with FERRY_CHECKS (Debug builds, which the sanitizer builds are, or
// -DFERRY_CHECKS=ON) check both and abort on a broken one, naming it. A release build
// checks neither: FERRY_HELD compiles to nothing (Lock keeps no holder), and a
// poller-only call from another thread is logged once.
#pragma once

namespace ferry {

[[noreturn]] void contract_broken(const char* what, const char* where) noexcept;

}  // namespace ferry

#if FERRY_CHECKS
#define FERRY_HELD(lock)                                                                     \
  do {                                                                                       \
    if (!(lock).held_here()) ::ferry::contract_broken("needs its lock held", __func__);       \
  } while (0)
#else
#define FERRY_HELD(lock) \
  do {                   \
  } while (0)
#endif
