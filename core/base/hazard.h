// Hazard pointers: a thread announces the object it is about to use, and whoever lets
// go of that object's last reference leaves its destruction to whichever of the two
// finishes last. The fd table's data-path lookups use them: one announcement costs a
// store and a re-read, where copying a shared_ptr out of an atomic slot costs four
// atomic read-modify-writes.
#pragma once

#include "core/base/fork_path.h"
#include <atomic>

namespace ferry::hazard {

// How many objects one thread may hold announced at once: a call on one socket, with a
// signal handler's call on another inside it, and so on.
constexpr int kDepth = 4;

struct Record {
  std::atomic<void*> slot[kDepth] = {};
  int depth = 0;  // touched by its own thread only (and its signal handlers, which nest)
  std::atomic<bool> owned{false};
  Record* next = nullptr;  // the list of records only grows; a thread's exit frees its own
};

namespace detail {
extern thread_local constinit Record* t_record;
extern std::atomic<bool> g_pending;  // something retired waits for an announcement to end
// What waits (g_many: more than the cells hold), so that withdrawing an announcement
// of anything else costs no sweep.
constexpr int kWaitingCells = 8;
extern std::atomic<void*> g_waiting[kWaitingCells];
extern std::atomic<bool> g_many;
Record* first_record() noexcept;
void sweep() noexcept;

inline bool waits(void* p) noexcept {
  if (g_many.load(std::memory_order_seq_cst)) return true;
  for (auto& c : g_waiting)
    if (c.load(std::memory_order_seq_cst) == p) return true;
  return false;
}
}  // namespace detail

// This thread's record; null while the thread exits or if none could be made.
inline Record* mine() noexcept {
  Record* r = detail::t_record;
  return r ? r : detail::first_record();
}

// At start, for the thread that loads ferry: takes the first record, which stays this
// thread's for the life of the process. Its children (a forking server's workers)
// inherit it, and registering the thread-exit hand-back would cost each of them a
// thread_local destructor and a free at exit.
void take_first() noexcept;

// Withdraws announcement i and destroys what was retired meanwhile and is now free.
inline void release(Record* r, int i) noexcept {
  void* p = r->slot[i].exchange(nullptr, std::memory_order_seq_cst);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  --r->depth;
  if (detail::g_pending.load(std::memory_order_seq_cst) && detail::waits(p)) detail::sweep();
}

// Announces what `src` holds, re-reading until it stays: once this returns p, p cannot
// be destroyed until release(r, i). Null (and nothing announced) when src holds null.
// Needs r->depth < kDepth.
template <class T>
T* protect(const std::atomic<T*>& src, Record* r, int& i) noexcept {
  T* p = src.load(std::memory_order_acquire);
  if (!p) return nullptr;
  i = r->depth++;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  for (;;) {
    r->slot[i].store(p, std::memory_order_seq_cst);
    T* again = src.load(std::memory_order_seq_cst);
    if (again == p) return p;
    if (!again) {
      release(r, i);
      return nullptr;
    }
    p = again;
  }
}

// Destroys p (with destroy) now, or once no thread announces it.
FERRY_FORK_PATH void retire(void* p, void (*destroy)(void*)) noexcept;

// In a forked child only the forking thread exists: the others' announcements are void.
FERRY_FORK_PATH void after_fork_child() noexcept;

}  // namespace ferry::hazard
