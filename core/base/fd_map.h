// fd number -> shared object (a Socket, an epoll set). Reads are lock-free; the table
// grows lazily in 1,024-fd leaves as higher numbers appear, so nothing is sized to
// RLIMIT_NOFILE and there is no fd ceiling below INT_MAX. The lowest fds (kLow) have
// their state and slot in the map itself, which lives on the fork page
// (core/base/fork_path.h): a forking server's listener, its accepted connection and a
// worker's epoll set are low, and binding or unbinding them after a fork copies no page
// but the one the fork copies anyway.
#pragma once

#include "core/base/fork_path.h"
#include "core/base/hazard.h"

#include <algorithm>
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
    const At a = at(fd);
    if (!a.bound()) return nullptr;
    return a.slot().socket.load(std::memory_order_acquire);
  }
  // The object behind fd for the length of a call, or empty when fd is not tracked.
  // Cheaper than get() (no atomic read-modify-write on the object's count): for the
  // data path.
  void borrow(int fd, Borrowed& b) const noexcept {
    const At a = at(fd);
    if (!a.bound()) return;  // the common case of a descriptor that is no socket: one byte read
    const Slot* s = &a.slot();
    hazard::Record* r = hazard::mine();
    if (!r || r->depth >= hazard::kDepth) {
      if ((b.ref_ = get(fd))) b.p_ = b.ref_.get();
      return;
    }
    if ((b.p_ = hazard::protect(s->raw, r, b.index_))) b.record_ = r;
  }
  // True when fd is tracked; cheaper than get() when the object is not needed.
  bool tracked(int fd) const noexcept { return at(fd).bound(); }
  // fd's state: kBound, kMarked, both or neither (0), as one read.
  static constexpr uint8_t kBound = 1, kMarked = 2;
  uint8_t state(int fd) const noexcept {
    const At a = at(fd);
    return a ? a.state().load(std::memory_order_acquire) : 0;
  }

  // A mark on one descriptor's binding, which the map's user gives a meaning to (the fd
  // table: the socket stays on kernel TCP for good), so that a call can decide without
  // borrowing the object. Dropped whenever the descriptor is bound anew or unbound.
  // marked() is exact unless another thread rebinds fd during the call, which only a
  // program closing a descriptor another thread is using can make happen.
  bool marked(int fd) const noexcept {
    const At a = at(fd);
    return a && (a.state().load(std::memory_order_acquire) & kMarked);
  }
  // Marks fd's binding if fd is still bound to obj.
  void mark(int fd, const T* obj) noexcept {
    const At a = at(fd);
    if (!a || a.slot().raw.load(std::memory_order_seq_cst) != obj) return;
    a.state().fetch_or(kMarked, std::memory_order_seq_cst);
    if (a.slot().raw.load(std::memory_order_seq_cst) != obj)
      a.state().fetch_and(static_cast<uint8_t>(~kMarked), std::memory_order_seq_cst);
  }

  // Makes the leaf of fd's range now, if it is missing (false only without memory).
  bool reserve(int fd) noexcept { return static_cast<bool>(at_or_grow(fd)); }
  static constexpr int kLow = 40;  // fds below this are bound in the map itself
  // Binds fd to s (replacing what was there). Allocates a leaf on first use of its
  // range; returns false only when that allocation fails. Always inline, as take().
  [[gnu::always_inline]] inline bool set(int fd, Ref s) noexcept;
  // Unbinds fd and returns what was bound.
  // Always inline: a forked child's close runs it, so it belongs in the fork path's
  // text (a section attribute does not hold for a template's instantiation).
  [[gnu::always_inline]] inline Ref take(int fd) noexcept;
  // Unbinds every tracked fd in [lo, hi]; cost follows the allocated leaves only.
  void take_range(unsigned lo, unsigned hi) noexcept;
  // Calls f(fd, socket) for each tracked fd, in fd order.
  template <class F>
  void for_each(F&& f) const;
  size_t size() const noexcept;

  // True when every node's value-initialized state is all zero bits, the state of the
  // kernel's zero pages nodes are made of (see fdmap_detail::make_node).
  static bool empty_nodes_are_zero_bits() noexcept {
    return zero_bits<Top>() && zero_bits<Mid>() && zero_bits<Leaf>();
  }

 private:
  template <class Node>
  static bool zero_bits() noexcept {
    constexpr std::align_val_t kAlign{alignof(Node)};
    auto* raw = static_cast<unsigned char*>(::operator new(sizeof(Node), kAlign, std::nothrow));
    if (!raw) return false;
    std::fill(raw, raw + sizeof(Node), static_cast<unsigned char>(0xa5));
    Node* n = new (raw) Node{};
    const bool zero = std::all_of(raw, raw + sizeof(Node), [](unsigned char c) { return c == 0; });
    n->~Node();
    ::operator delete(raw, kAlign);
    return zero;
  }

  static constexpr int kLeafBits = 10, kMidBits = 10, kTopBits = 11;
  static constexpr int kLeaf = 1 << kLeafBits, kMid = 1 << kMidBits, kTop = 1 << kTopBits;
  static_assert(kLeafBits + kMidBits + kTopBits == 31, "the table must cover every non-negative int");

  struct Slot {
    std::atomic<Ref> socket;
    std::atomic<T*> raw{nullptr};  // what socket holds, for borrow()
  };
  // A slot's state: bound (get() finds its object) and marked. Kept apart from the
  // slots, one byte per fd at the start of the leaf: the question nearly every call of
  // the program asks first (is this descriptor a tracked socket? one on kernel TCP for
  // good?) reads one byte, and a low fd's state shares its page with its slot.
  static constexpr int kGroup = 64;  // slots a bit of Leaf::used stands for
  // Page-aligned: the state, the used bits and the slots of fds below 127 are on one
  // page, which a forked child that binds or unbinds such an fd copies once.
  struct alignas(4096) Leaf {
    // Bit g: a slot in [g * kGroup, (g + 1) * kGroup) was bound at some time. Never
    // cleared, so a walk may skip a group whose bit is clear without racing a bind.
    std::atomic<uint64_t> used[kLeaf / kGroup / 64 + (kLeaf / kGroup % 64 != 0)]{};
    std::atomic<uint8_t> state[kLeaf]{};
    Slot slots[kLeaf];
  };
  struct Mid {
    std::atomic<Leaf*> leaves[kMid]{};
  };
  struct Top {
    std::atomic<Mid*> mids[kTop]{};
  };
  Mid* mid_of(unsigned u) const noexcept {
    Top* t = top_.load(std::memory_order_acquire);
    return t ? t->mids[u >> (kLeafBits + kMidBits)].load(std::memory_order_acquire) : nullptr;
  }

  Leaf* leaf_of(unsigned u) const noexcept {
    Mid* m = mid_of(u);
    return m ? m->leaves[(u >> kLeafBits) & (kMid - 1)].load(std::memory_order_acquire) : nullptr;
  }
  // Where fd's slot and state are, if they exist: in the map for a low fd, else in its
  // leaf (the first leaf, fds below 1,024, is found without walking the tree).
  struct At {
    Slot* slot_ = nullptr;
    std::atomic<uint8_t>* state_ = nullptr;
    Leaf* leaf = nullptr;  // null for a low fd
    explicit operator bool() const { return slot_ != nullptr; }
    Slot& slot() const { return *slot_; }
    std::atomic<uint8_t>& state() const { return *state_; }
    bool bound() const { return slot_ && (state_->load(std::memory_order_acquire) & kBound); }
  };
  At at(int fd) const noexcept {
    if (fd < 0) return {};
    const unsigned u = static_cast<unsigned>(fd);
    if (u < kLow) return {&low_slots_[u], &low_state_[u]};
    return in(u < kLeaf ? first_.load(std::memory_order_acquire) : leaf_of(u), u);
  }
  static At in(Leaf* l, unsigned u) noexcept {
    if (!l) return {};
    return {&l->slots[u & (kLeaf - 1)], &l->state[u & (kLeaf - 1)], l};
  }
  At at_or_grow(int fd) noexcept;
  template <class V>
  void walk(V&& visit) const;

  // A few words, so that the map itself sits in the data a forked child writes anyway
  // (core/base/fork_path.h): the tree's top is allocated with the first leaf.
  std::atomic<Leaf*> first_{nullptr};  // the leaf of fds 0-1023, once it exists
  std::atomic<size_t> size_{0};
  // One past the highest fd ever bound: walks stop there, so a process whose fds are
  // low reads a few cache lines of the table, not its whole first leaf (a forked
  // child's handler walks it, and every page it touches first costs the child).
  std::atomic<unsigned> end_{0};
  std::atomic<Top*> top_{nullptr};  // made with the first leaf
  // The low fds' states and slots (a leaf's first kLow stay unused). Mutable: at() is
  // const and hands out where they are.
  mutable std::atomic<uint8_t> low_state_[kLow]{};
  mutable Slot low_slots_[kLow];
};

// Visits every slot of a group that was ever used, below end_, in fd order.
template <class T>
template <class V>
void FdMap<T>::walk(V&& visit) const {
  if (size_.load(std::memory_order_acquire) == 0) return;
  const unsigned end = end_.load(std::memory_order_acquire);
  for (unsigned u = 0; u < end && u < kLow; ++u) visit(static_cast<int>(u), low_slots_[u], low_state_[u]);
  if (end <= kLow) return;
  constexpr unsigned kMidSpan = 1u << (kLeafBits + kMidBits);
  for (unsigned base = 0; base < end; base += kLeaf) {
    if (!mid_of(base)) {
      base = (base / kMidSpan + 1) * kMidSpan - kLeaf;  // on to the next mid
      continue;
    }
    Leaf* l = leaf_of(base);
    if (!l) continue;
    for (int g = 0; g < kLeaf / kGroup && base + g * kGroup < end; ++g) {
      if (!(l->used[g / 64].load(std::memory_order_acquire) >> (g % 64) & 1)) continue;
      for (int j = base == 0 && g * kGroup < kLow ? kLow : g * kGroup; j < (g + 1) * kGroup; ++j)
        visit(static_cast<int>(base) | j, l->slots[j], l->state[j]);
    }
  }
}

template <class T>
template <class F>
void FdMap<T>::for_each(F&& f) const {
  walk([&](int fd, const Slot& slot, const std::atomic<uint8_t>& state) {
    if (!(state.load(std::memory_order_acquire) & kBound)) return;
    if (Ref s = slot.socket.load(std::memory_order_acquire)) f(fd, s);
  });
}

namespace fdmap_detail {
// The tree's nodes are zero pages, not the heap's: the first 128 KiB of them (the
// nodes made at start) pages of libferry's .bss, the rest mappings of their own. Zero
// pages are a node in its value-initialized state (every member is an atomic whose zero
// bits are its empty value; FdTable.ANodeIsZeroPages checks it), so making one writes
// nothing, and a page of it is present only once the table writes there. A process
// whose fds are low then holds one page of each node, not the 13 pages of a top, a mid
// and a leaf; each of its forks copies that many page-table entries fewer, and its heap
// is the program's alone.
void* map_pages(size_t bytes) noexcept;
void unmap_pages(void* p, size_t bytes) noexcept;
bool in_arena(const void* p) noexcept;

template <class Node>
Node* make_node() noexcept {
  return std::launder(static_cast<Node*>(map_pages(sizeof(Node))));
}
template <class Node>
void free_node(Node* n) noexcept {
  if (!n) return;
  n->~Node();
  unmap_pages(n, sizeof(Node));
}

// The node behind `slot`, made (once, whichever thread wins) if missing.
template <class Node>
Node* node_at(std::atomic<Node*>& slot) noexcept {
  Node* n = slot.load(std::memory_order_acquire);
  if (n) return n;
  Node* fresh = make_node<Node>();
  if (!fresh) return nullptr;
  if (slot.compare_exchange_strong(n, fresh, std::memory_order_acq_rel)) return fresh;
  free_node(fresh);  // another thread grew it first; n now holds theirs
  return n;
}
}  // namespace fdmap_detail

template <class T>
FdMap<T>::~FdMap() {
  Top* top = top_.load();
  if (!top) return;
  for (auto& t : top->mids) {
    Mid* m = t.load();
    if (!m) continue;
    for (auto& l : m->leaves) fdmap_detail::free_node(l.load());
    fdmap_detail::free_node(m);
  }
  fdmap_detail::free_node(top);
}

template <class T>
typename FdMap<T>::At FdMap<T>::at_or_grow(int fd) noexcept {
  if (fd < 0) return {};
  unsigned u = static_cast<unsigned>(fd);
  if (u < kLow) return at(fd);
  Top* t = fdmap_detail::node_at(top_);
  Mid* m = t ? fdmap_detail::node_at(t->mids[u >> (kLeafBits + kMidBits)]) : nullptr;
  Leaf* l = m ? fdmap_detail::node_at(m->leaves[(u >> kLeafBits) & (kMid - 1)]) : nullptr;
  if (l && u < kLeaf) first_.store(l, std::memory_order_release);  // every thread stores the one winner
  return in(l, u);
}

template <class T>
inline bool FdMap<T>::set(int fd, Ref s) noexcept {
  const At a = at_or_grow(fd);
  if (!a) return false;
  const unsigned u = static_cast<unsigned>(fd);
  Slot* slot = &a.slot();
  if (Leaf* leaf = a.leaf) {
    const unsigned g = (u & (kLeaf - 1)) / kGroup;
    if (!(leaf->used[g / 64].load(std::memory_order_relaxed) >> (g % 64) & 1))
      leaf->used[g / 64].fetch_or(uint64_t{1} << (g % 64), std::memory_order_seq_cst);
  }
  for (unsigned e = end_.load(std::memory_order_relaxed); e <= u && !end_.compare_exchange_weak(e, u + 1);) {
  }
  bool had = a.state().exchange(0, std::memory_order_acq_rel) & kBound;
  // raw first: a borrower must never find the slot's old object after its reference went.
  slot->raw.store(s.get(), std::memory_order_seq_cst);
  slot->socket.store(std::move(s), std::memory_order_release);
  a.state().store(kBound, std::memory_order_seq_cst);  // unmarked, whatever a racing mark() did
  if (!had) size_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <class T>
typename FdMap<T>::Ref FdMap<T>::take(int fd) noexcept {
  const At a = at(fd);
  // Looked at before written: a forked child closing a descriptor that is no socket
  // writes nothing (a write costs it a page).
  if (!a.bound() || !(a.state().exchange(0, std::memory_order_acq_rel) & kBound)) return nullptr;
  Slot* slot = &a.slot();
  size_.fetch_sub(1, std::memory_order_relaxed);
  slot->raw.store(nullptr, std::memory_order_seq_cst);
  return slot->socket.exchange(nullptr, std::memory_order_acq_rel);
}

template <class T>
void FdMap<T>::take_range(unsigned lo, unsigned hi) noexcept {
  if (lo > static_cast<unsigned>(INT_MAX)) return;
  if (hi > static_cast<unsigned>(INT_MAX)) hi = INT_MAX;
  for (; lo < kLow; ++lo) {
    if (lo > hi) return;
    take(static_cast<int>(lo));
  }
  for (unsigned fd = lo; fd <= hi;) {
    Mid* m = mid_of(fd);
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

}  // namespace ferry
