// One line per connection for `ferry ss`: a table of the process's TCP connections
// (kept on TCP, upgrading, on RDMA, gone back), each with why it is where it is and what
// ferry carried for it. The launcher reads it through /proc/PID/mem, as it reads the
// counters (core/base/stats.h, whose `report` names the table); kernel TCP's own view of
// each socket (addresses, state, bytes) it takes from the kernel by the inode.
//
// An entry is written by the connection's own events (accept or connect, each change of
// its state, a reason it stays on or goes back to TCP) and its RDMA bytes by the calls
// that move them (a relaxed add on the entry's own cache line); nothing is read back here.
// A reader in another process sees each field whole but the fields of one entry perhaps
// from two moments: a diagnostic, never a decision.
#pragma once


#include <atomic>
#include <cstdint>

namespace ferry::conn_report {

struct alignas(64) Entry {
  // The socket's inode (st_ino of its descriptor); 0: a free entry.
  std::atomic<uint64_t> inode{0};
  std::atomic<uint8_t> role{0};   // kClient or kServer
  std::atomic<uint8_t> state{0};  // kKernel, or kLinked + ConnState (core/proto/conn_state.h)
  std::atomic<uint8_t> flags{0};  // kInherited
  // Why the connection is on (or went back to) kernel TCP: 1 + the index of the counter
  // that counted it (stats::index_of), or kWhyLoopback; 0: no reason (yet).
  std::atomic<uint16_t> why{0};
  std::atomic<uint64_t> rdma_sent{0};
  std::atomic<uint64_t> rdma_received{0};
  std::atomic<uint64_t> registered{0};  // bytes registered for its RDMA side
  // The queue pair its RDMA side uses (its link to the peer), by number; 0: none.
  std::atomic<uint32_t> qp{0};
  // The next free entry's index + 1 (0: none), while this one is free.
  std::atomic<uint32_t> next_free{0};
};
static_assert(sizeof(Entry) == 64);

inline constexpr uint8_t kClient = 1, kServer = 2;
inline constexpr uint8_t kKernel = 0, kLinked = 1;
inline constexpr uint8_t kInherited = 1;
inline constexpr uint16_t kWhyLoopback = 0xffff;  // the peer is on this host
// Entries of one process: a server with more connections lists this many.
inline constexpr uint32_t kCapacity = 1u << 16;

// An entry for the connection whose socket is `fd` (its inode is taken here), or
// nullptr when the table is full or cannot be made. Each entry taken is given back once.
Entry* take(int fd, uint8_t role, uint8_t flags = 0) noexcept;
void give_back(Entry* e) noexcept;

// Notes on an entry (a null entry: nothing).
inline void state(Entry* e, uint8_t s) noexcept {
  if (e) e->state.store(s, std::memory_order_relaxed);
}
void why(Entry* e, const std::atomic<uint64_t>& counter) noexcept;
inline void why(Entry* e, uint16_t code) noexcept {
  if (e) e->why.store(code, std::memory_order_relaxed);
}
inline void sent(Entry* e, uint64_t n) noexcept {
  if (e) e->rdma_sent.fetch_add(n, std::memory_order_relaxed);
}
inline void received(Entry* e, uint64_t n) noexcept {
  if (e) e->rdma_received.fetch_add(n, std::memory_order_relaxed);
}
inline void registered(Entry* e, uint64_t n, uint32_t qp) noexcept {
  if (!e) return;
  e->registered.store(n, std::memory_order_relaxed);
  e->qp.store(qp, std::memory_order_relaxed);
}

}  // namespace ferry::conn_report
