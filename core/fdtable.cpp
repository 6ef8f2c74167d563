#include "core/fdtable.h"

#include <new>

namespace ferry {

FdTable::~FdTable() {
  for (auto& t : top_) {
    Mid* m = t.load();
    if (!m) continue;
    for (auto& l : m->leaves) delete l.load();
    delete m;
  }
}

namespace {
// The node behind `slot`, allocated (once, whichever thread wins) if missing.
template <class Node>
Node* node_at(std::atomic<Node*>& slot) noexcept {
  Node* n = slot.load(std::memory_order_acquire);
  if (n) return n;
  Node* fresh = new (std::nothrow) Node;
  if (!fresh) return nullptr;
  if (slot.compare_exchange_strong(n, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread grew it first; n now holds theirs
  return n;
}
}  // namespace

FdTable::Slot* FdTable::find_or_grow(int fd) noexcept {
  if (fd < 0) return nullptr;
  unsigned u = static_cast<unsigned>(fd);
  Mid* m = node_at(top_[u >> (kLeafBits + kMidBits)]);
  Leaf* l = m ? node_at(m->leaves[(u >> kLeafBits) & (kMid - 1)]) : nullptr;
  return l ? &l->slots[u & (kLeaf - 1)] : nullptr;
}

bool FdTable::set(int fd, SocketRef s) noexcept {
  Slot* slot = find_or_grow(fd);
  if (!slot) return false;
  bool had = slot->present.exchange(false, std::memory_order_acq_rel);
  slot->socket.store(std::move(s), std::memory_order_release);
  slot->present.store(true, std::memory_order_release);
  if (!had) size_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

SocketRef FdTable::take(int fd) noexcept {
  Slot* slot = const_cast<Slot*>(find(fd));
  if (!slot || !slot->present.exchange(false, std::memory_order_acq_rel)) return nullptr;
  size_.fetch_sub(1, std::memory_order_relaxed);
  return slot->socket.exchange(nullptr, std::memory_order_acq_rel);
}

void FdTable::take_range(unsigned lo, unsigned hi) noexcept {
  if (lo > static_cast<unsigned>(INT_MAX)) return;
  if (hi > static_cast<unsigned>(INT_MAX)) hi = INT_MAX;
  for (unsigned fd = lo; fd <= hi;) {
    Mid* m = top_[fd >> (kLeafBits + kMidBits)].load(std::memory_order_acquire);
    unsigned span = m ? (m->leaves[(fd >> kLeafBits) & (kMid - 1)].load(std::memory_order_acquire)
                             ? 1u
                             : kLeaf - (fd & (kLeaf - 1)))
                      : (1u << (kLeafBits + kMidBits)) - (fd & ((1u << (kLeafBits + kMidBits)) - 1));
    if (span == 1) take(static_cast<int>(fd));
    if (hi - fd < span) break;
    fd += span;
  }
}

size_t FdTable::size() const noexcept { return size_.load(std::memory_order_relaxed); }

namespace {
// Constant-initialized and never destroyed: sockets may be used while the process exits.
union Holder {
  constexpr Holder() : table() {}
  ~Holder() {}
  FdTable table;
};
constinit Holder g_holder;
}  // namespace

FdTable& fd_table() noexcept { return g_holder.table; }

}  // namespace ferry
