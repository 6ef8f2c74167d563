// fd number -> shared object (a Socket, an epoll set). Reads are lock-free; the table
// grows lazily in 1,024-fd leaves as higher numbers appear, so nothing is sized to
// RLIMIT_NOFILE and there is no fd ceiling below INT_MAX.
#pragma once

#include "core/fork_path.h"
#include "core/hazard.h"
#include "core/socket.h"

#include <atomic>
#include <climits>
#include <cstddef>
#include <memory>
#include <new>

namespace ferry {

template <class T>
class FdMap {
 public:
  using Ref = std::shared_ptr<T>;

  // The object behind an fd for the length of one call, without touching its reference
  // count: it is announced as in use (see hazard.h), so it outlives the borrow even if
  // the fd is closed meanwhile. Objects borrowed this way must be destroyed through
  // hazard::retire (see make_socket). With no announcement free, holds a reference.
  class Borrowed {
   public:
    Borrowed() = default;
    Borrowed(const Borrowed&) = delete;
    Borrowed& operator=(const Borrowed&) = delete;
    ~Borrowed() { reset(); }
    // Lets go early.
    void reset() {
      if (p_ && record_) hazard::release(record_, index_);
      p_ = nullptr;
      record_ = nullptr;
      ref_.reset();
    }
    explicit operator bool() const { return p_ != nullptr; }
    T* get() const { return p_; }
    T* operator->() const { return p_; }
    T& operator*() const { return *p_; }

   private:
    friend class FdMap;
    T* p_ = nullptr;
    hazard::Record* record_ = nullptr;
    int index_ = 0;
    Ref ref_;
  };

  FdMap() = default;
  ~FdMap();
  FdMap(const FdMap&) = delete;
  FdMap& operator=(const FdMap&) = delete;

  // The object behind fd, or null when fd is not tracked.
  Ref get(int fd) const noexcept {
    const Slot* s = find(fd);
    if (!s || !s->present.load(std::memory_order_acquire)) return nullptr;
    return s->socket.load(std::memory_order_acquire);
  }
  // The object behind fd for the length of a call, or empty when fd is not tracked.
  // Cheaper than get() (no atomic read-modify-write on the object's count): for the
  // data path.
  void borrow(int fd, Borrowed& b) const noexcept {
    const Slot* s = find(fd);
    if (!s) return;
    hazard::Record* r = hazard::mine();
    if (!r || r->depth >= hazard::kDepth) {
      if ((b.ref_ = get(fd))) b.p_ = b.ref_.get();
      return;
    }
    if ((b.p_ = hazard::protect(s->raw, r, b.index_))) b.record_ = r;
  }
  // True when fd is tracked; cheaper than get() when the object is not needed.
  bool tracked(int fd) const noexcept {
    const Slot* s = find(fd);
    return s && s->present.load(std::memory_order_acquire);
  }

  // A mark on one descriptor's binding, which the map's user gives a meaning to (the fd
  // table: the socket stays on kernel TCP for good), so that a call can decide without
  // borrowing the object. Dropped whenever the descriptor is bound anew or unbound.
  // marked() is exact unless another thread rebinds fd during the call, which only a
  // program closing a descriptor another thread is using can make happen.
  bool marked(int fd) const noexcept {
    const Slot* s = find(fd);
    return s && s->mark.load(std::memory_order_acquire);
  }
  // Marks fd's binding if fd is still bound to obj.
  void mark(int fd, const T* obj) noexcept {
    Slot* s = const_cast<Slot*>(find(fd));
    if (!s || s->raw.load(std::memory_order_seq_cst) != obj) return;
    s->mark.store(true, std::memory_order_seq_cst);
    if (s->raw.load(std::memory_order_seq_cst) != obj) s->mark.store(false, std::memory_order_seq_cst);
  }

  // Binds fd to s (replacing what was there). Allocates a leaf on first use of its
  // range; returns false only when that allocation fails.
  bool set(int fd, Ref s) noexcept;
  // Unbinds fd and returns what was bound.
  FERRY_FORK_PATH Ref take(int fd) noexcept;
  // Unbinds every tracked fd in [lo, hi]; cost follows the allocated leaves only.
  void take_range(unsigned lo, unsigned hi) noexcept;
  // Calls f(fd, socket) for each tracked fd, in fd order.
  template <class F>
  void for_each(F&& f) const;
  // The same with f(fd, object&), taking no reference: for a process with one thread
  // (a forked child's handler), where nothing can unbind an fd meanwhile. Reads the
  // table and writes nothing (a reference count is a write).
  template <class F>
  void for_each_alone(F&& f) const;
  size_t size() const noexcept;

 private:
  static constexpr int kLeafBits = 10, kMidBits = 10, kTopBits = 11;
  static constexpr int kLeaf = 1 << kLeafBits, kMid = 1 << kMidBits, kTop = 1 << kTopBits;
  static_assert(kLeafBits + kMidBits + kTopBits == 31, "the table must cover every non-negative int");

  struct Slot {
    std::atomic<bool> present{false};
    std::atomic<Ref> socket;
    std::atomic<T*> raw{nullptr};  // what socket holds, for borrow()
    std::atomic<bool> mark{false};
  };
  static constexpr int kGroup = 64;  // slots a bit of Leaf::used stands for
  struct Leaf {
    // Bit g: a slot in [g * kGroup, (g + 1) * kGroup) was bound at some time. Never
    // cleared, so a walk may skip a group whose bit is clear without racing a bind.
    std::atomic<uint64_t> used[kLeaf / kGroup / 64 + (kLeaf / kGroup % 64 != 0)]{};
    Slot slots[kLeaf];
  };
  struct Mid {
    std::atomic<Leaf*> leaves[kMid]{};
  };

  Leaf* leaf_of(unsigned u) const noexcept {
    Mid* m = top_[u >> (kLeafBits + kMidBits)].load(std::memory_order_acquire);
    return m ? m->leaves[(u >> kLeafBits) & (kMid - 1)].load(std::memory_order_acquire) : nullptr;
  }
  const Slot* find(int fd) const noexcept {
    if (fd < 0) return nullptr;
    unsigned u = static_cast<unsigned>(fd);
    Leaf* l = leaf_of(u);
    return l ? &l->slots[u & (kLeaf - 1)] : nullptr;
  }
  Slot* find_or_grow(int fd) noexcept;
  template <class V>
  void walk(V&& visit) const;

  std::atomic<Mid*> top_[kTop]{};
  std::atomic<size_t> size_{0};
  // One past the highest fd ever bound: walks stop there, so a process whose fds are
  // low reads a few cache lines of the table, not its whole first leaf (a forked
  // child's handler walks it, and every page it touches first costs the child).
  std::atomic<unsigned> end_{0};
};

// Visits every slot of a group that was ever used, below end_, in fd order.
template <class T>
template <class V>
void FdMap<T>::walk(V&& visit) const {
  if (size_.load(std::memory_order_acquire) == 0) return;
  const unsigned end = end_.load(std::memory_order_acquire);
  constexpr unsigned kMidSpan = 1u << (kLeafBits + kMidBits);
  for (unsigned base = 0; base < end; base += kLeaf) {
    if (!top_[base / kMidSpan].load(std::memory_order_acquire)) {
      base = (base / kMidSpan + 1) * kMidSpan - kLeaf;  // on to the next mid
      continue;
    }
    Leaf* l = leaf_of(base);
    if (!l) continue;
    for (int g = 0; g < kLeaf / kGroup && base + g * kGroup < end; ++g) {
      if (!(l->used[g / 64].load(std::memory_order_acquire) >> (g % 64) & 1)) continue;
      for (int j = g * kGroup; j < (g + 1) * kGroup; ++j) visit(static_cast<int>(base) | j, l->slots[j]);
    }
  }
}

template <class T>
template <class F>
void FdMap<T>::for_each(F&& f) const {
  walk([&](int fd, const Slot& slot) {
    if (!slot.present.load(std::memory_order_acquire)) return;
    if (Ref s = slot.socket.load(std::memory_order_acquire)) f(fd, s);
  });
}

template <class T>
template <class F>
void FdMap<T>::for_each_alone(F&& f) const {
  walk([&](int fd, const Slot& slot) {
    if (T* p = slot.raw.load(std::memory_order_relaxed)) f(fd, *p);
  });
}

template <class T>
FdMap<T>::~FdMap() {
  for (auto& t : top_) {
    Mid* m = t.load();
    if (!m) continue;
    for (auto& l : m->leaves) delete l.load();
    delete m;
  }
}

namespace fdmap_detail {
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
}  // namespace fdmap_detail

template <class T>
typename FdMap<T>::Slot* FdMap<T>::find_or_grow(int fd) noexcept {
  if (fd < 0) return nullptr;
  unsigned u = static_cast<unsigned>(fd);
  Mid* m = fdmap_detail::node_at(top_[u >> (kLeafBits + kMidBits)]);
  Leaf* l = m ? fdmap_detail::node_at(m->leaves[(u >> kLeafBits) & (kMid - 1)]) : nullptr;
  return l ? &l->slots[u & (kLeaf - 1)] : nullptr;
}

template <class T>
bool FdMap<T>::set(int fd, Ref s) noexcept {
  Slot* slot = find_or_grow(fd);
  if (!slot) return false;
  const unsigned u = static_cast<unsigned>(fd);
  Leaf* leaf = leaf_of(u);
  const unsigned g = (u & (kLeaf - 1)) / kGroup;
  if (!(leaf->used[g / 64].load(std::memory_order_relaxed) >> (g % 64) & 1))
    leaf->used[g / 64].fetch_or(uint64_t{1} << (g % 64), std::memory_order_seq_cst);
  for (unsigned e = end_.load(std::memory_order_relaxed); e <= u && !end_.compare_exchange_weak(e, u + 1);) {
  }
  bool had = slot->present.exchange(false, std::memory_order_acq_rel);
  slot->mark.store(false, std::memory_order_seq_cst);
  // raw first: a borrower must never find the slot's old object after its reference went.
  slot->raw.store(s.get(), std::memory_order_seq_cst);
  slot->mark.store(false, std::memory_order_seq_cst);  // a mark() racing with this one
  slot->socket.store(std::move(s), std::memory_order_release);
  slot->present.store(true, std::memory_order_release);
  if (!had) size_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <class T>
typename FdMap<T>::Ref FdMap<T>::take(int fd) noexcept {
  Slot* slot = const_cast<Slot*>(find(fd));
  if (!slot || !slot->present.exchange(false, std::memory_order_acq_rel)) return nullptr;
  size_.fetch_sub(1, std::memory_order_relaxed);
  slot->mark.store(false, std::memory_order_seq_cst);
  slot->raw.store(nullptr, std::memory_order_seq_cst);
  return slot->socket.exchange(nullptr, std::memory_order_acq_rel);
}

template <class T>
void FdMap<T>::take_range(unsigned lo, unsigned hi) noexcept {
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

template <class T>
size_t FdMap<T>::size() const noexcept {
  return size_.load(std::memory_order_relaxed);
}

using FdTable = FdMap<Socket>;

// The process's table of TCP sockets. Never destroyed: calls may arrive during exit.
FERRY_FORK_PATH FdTable& fd_table() noexcept;

}  // namespace ferry
