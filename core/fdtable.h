// fd number -> Socket. Reads are lock-free; the table grows lazily in 1,024-fd leaves
// as sockets with higher numbers appear, so nothing is sized to RLIMIT_NOFILE and
// there is no fd ceiling below INT_MAX.
#pragma once

#include "core/socket.h"

#include <atomic>
#include <climits>
#include <cstddef>
#include <memory>

namespace ferry {

class FdTable {
 public:
  FdTable() = default;
  ~FdTable();
  FdTable(const FdTable&) = delete;
  FdTable& operator=(const FdTable&) = delete;

  // The socket behind fd, or null when fd is not a tracked TCP socket.
  SocketRef get(int fd) const noexcept {
    const Slot* s = find(fd);
    if (!s || !s->present.load(std::memory_order_acquire)) return nullptr;
    return s->socket.load(std::memory_order_acquire);
  }
  // True when fd is tracked; cheaper than get() when the object is not needed.
  bool tracked(int fd) const noexcept {
    const Slot* s = find(fd);
    return s && s->present.load(std::memory_order_acquire);
  }

  // Binds fd to s (replacing what was there). Allocates a leaf on first use of its
  // range; returns false only when that allocation fails.
  bool set(int fd, SocketRef s) noexcept;
  // Unbinds fd and returns what was bound.
  SocketRef take(int fd) noexcept;
  // Unbinds every tracked fd in [lo, hi]; cost follows the allocated leaves only.
  void take_range(unsigned lo, unsigned hi) noexcept;
  // Calls f(fd, socket) for each tracked fd, in fd order.
  template <class F>
  void for_each(F&& f) const;
  size_t size() const noexcept;

 private:
  static constexpr int kLeafBits = 10, kMidBits = 10, kTopBits = 11;
  static constexpr int kLeaf = 1 << kLeafBits, kMid = 1 << kMidBits, kTop = 1 << kTopBits;
  static_assert(kLeafBits + kMidBits + kTopBits == 31, "the table must cover every non-negative int");

  struct Slot {
    std::atomic<bool> present{false};
    std::atomic<SocketRef> socket;
  };
  struct Leaf {
    Slot slots[kLeaf];
  };
  struct Mid {
    std::atomic<Leaf*> leaves[kMid]{};
  };

  const Slot* find(int fd) const noexcept {
    if (fd < 0) return nullptr;
    unsigned u = static_cast<unsigned>(fd);
    Mid* m = top_[u >> (kLeafBits + kMidBits)].load(std::memory_order_acquire);
    if (!m) return nullptr;
    Leaf* l = m->leaves[(u >> kLeafBits) & (kMid - 1)].load(std::memory_order_acquire);
    return l ? &l->slots[u & (kLeaf - 1)] : nullptr;
  }
  Slot* find_or_grow(int fd) noexcept;

  std::atomic<Mid*> top_[kTop]{};
  std::atomic<size_t> size_{0};
};

template <class F>
void FdTable::for_each(F&& f) const {
  for (int t = 0; t < kTop; ++t) {
    Mid* m = top_[t].load(std::memory_order_acquire);
    if (!m) continue;
    for (int i = 0; i < kMid; ++i) {
      Leaf* l = m->leaves[i].load(std::memory_order_acquire);
      if (!l) continue;
      for (int j = 0; j < kLeaf; ++j) {
        if (!l->slots[j].present.load(std::memory_order_acquire)) continue;
        SocketRef s = l->slots[j].socket.load(std::memory_order_acquire);
        if (s) f((t << (kLeafBits + kMidBits)) | (i << kLeafBits) | j, s);
      }
    }
  }
}

// The process's table. Never destroyed: calls may arrive during exit.
FdTable& fd_table() noexcept;

}  // namespace ferry
