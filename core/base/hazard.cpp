#include "core/base/hazard.h"

#include "core/base/lock.h"

#include <mutex>
#include <new>
#include <vector>

namespace ferry::hazard {
namespace detail {
thread_local constinit Record* t_record = nullptr;
FERRY_FORK_DATA constinit std::atomic<bool> g_pending{false};
std::atomic<void*> g_waiting[kWaitingCells] = {};
FERRY_FORK_DATA constinit std::atomic<bool> g_many{false};
}  // namespace detail

using detail::g_pending;
using detail::t_record;

namespace {

// The first record, in the data a forked child writes anyway (core/base/fork_path.h): the
// thread that loads ferry takes it at start, so a child forked from that thread (a
// server's worker) announces into a page it copies regardless, and takes no record.
FERRY_FORK_DATA constinit Record g_first;
FERRY_FORK_DATA constinit std::atomic<Record*> g_records{&g_first};

struct Retired {
  void* p;
  void (*destroy)(void*);
};
// Constant-initialised and trivially destroyed: usable while the process exits, and a
// forked child resets it without constructing anything.
constinit Lock g_retired_mu;
Lock& retired_mu() { return g_retired_mu; }
// Never destroyed: objects may be retired while the process exits.
std::vector<Retired>& retired() {
  static auto* v = new std::vector<Retired>;
  return *v;
}

// Under retired_mu. A waiting object keeps its cell until it is destroyed, so that a
// withdrawal reading the cells never misses it while others come and go.
void mark_waiting(void* p) noexcept {
  for (auto& c : detail::g_waiting) {
    if (c.load(std::memory_order_relaxed)) continue;
    c.store(p, std::memory_order_seq_cst);
    return;
  }
  detail::g_many.store(true, std::memory_order_seq_cst);  // until nothing waits
}

void unmark_waiting(void* p) noexcept {
  for (auto& c : detail::g_waiting)
    if (c.load(std::memory_order_relaxed) == p) c.store(nullptr, std::memory_order_seq_cst);
}

bool announced(void* p) noexcept {
  for (Record* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    for (auto& s : r->slot)
      if (s.load(std::memory_order_seq_cst) == p) return true;
  }
  return false;
}

}  // namespace

// Destroys every retired object nobody announces (outside the lock: a destructor may
// retire more).
void detail::sweep() noexcept {
  std::vector<Retired> free_now;
  {
    std::lock_guard<Lock> g(retired_mu());
    auto& list = retired();
    for (size_t i = 0; i < list.size();) {
      if (announced(list[i].p)) {
        ++i;
        continue;
      }
      free_now.push_back(list[i]);
      unmark_waiting(list[i].p);
      list[i] = list.back();
      list.pop_back();
    }
    if (list.empty()) detail::g_many.store(false, std::memory_order_seq_cst);
    g_pending.store(!list.empty(), std::memory_order_seq_cst);
  }
  for (const Retired& r : free_now) r.destroy(r.p);
}

namespace {

Record* take_record() noexcept {
  for (Record* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    bool was = false;
    if (!r->owned.load(std::memory_order_relaxed) && r->owned.compare_exchange_strong(was, true)) return r;
  }
  Record* r = new (std::nothrow) Record;
  if (!r) return nullptr;
  r->owned.store(true);
  Record* head = g_records.load(std::memory_order_acquire);
  do {
    r->next = head;
  } while (!g_records.compare_exchange_weak(head, r, std::memory_order_acq_rel));
  return r;
}

thread_local bool t_exiting = false;

// Gives the thread's record back when the thread ends.
struct Owner {
  bool armed = false;
  ~Owner() {
    t_exiting = true;
    Record* r = t_record;
    t_record = nullptr;
    if (!r) return;
    for (auto& s : r->slot) s.store(nullptr, std::memory_order_seq_cst);
    r->depth = 0;
    r->owned.store(false, std::memory_order_release);
    if (g_pending.load(std::memory_order_seq_cst)) detail::sweep();
  }
};
thread_local Owner t_owner;

}  // namespace

void take_first() noexcept {
  bool was = false;
  if (t_record || !g_first.owned.compare_exchange_strong(was, true)) return;
  t_record = &g_first;
}

Record* detail::first_record() noexcept {
  if (t_exiting) return nullptr;
  t_owner.armed = true;  // its first use registers the hand-back at thread exit
  return t_record = take_record();
}

void retire(void* p, void (*destroy)(void*)) noexcept {
  if (!announced(p)) {
    destroy(p);
    return;
  }
  {
    std::lock_guard<Lock> g(retired_mu());
    retired().push_back({p, destroy});
    mark_waiting(p);
    g_pending.store(true, std::memory_order_seq_cst);
  }
  // The announcement may have ended between the first look and g_pending: look again.
  detail::sweep();
}

void after_fork_child() noexcept {
  Record* me = t_record;
  for (Record* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    if (r == me) continue;
    for (auto& s : r->slot) s.store(nullptr, std::memory_order_relaxed);
    r->depth = 0;
    r->owned.store(false, std::memory_order_relaxed);
  }
  if (g_pending.load()) detail::sweep();
}

}  // namespace ferry::hazard
