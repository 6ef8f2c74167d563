#include "core/base/conn_report.h"

#include "core/base/stats.h"

#include <sys/mman.h>
#include <sys/stat.h>

namespace ferry::conn_report {
namespace {

// The table: kCapacity entries, reserved once and touched as they are first used (a
// process with few connections maps a page or two of it). A forked child has its own
// copy, as it has its own copy of the sockets it inherited.
std::atomic<Entry*> g_table{nullptr};
// Entries handed out at least once: the ones past it were never touched.
std::atomic<uint32_t> g_used{0};
// Entries given back: a stack of index + 1 in the low half, and a count of pops in the
// high half so that a pop racing with a pop and a push cannot take a stale next.
std::atomic<uint64_t> g_free{0};

Entry* table() noexcept {
  Entry* t = g_table.load(std::memory_order_acquire);
  if (t) return t;
  void* m = mmap(nullptr, sizeof(Entry) * kCapacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  Entry* mine = static_cast<Entry*>(m);
  if (!g_table.compare_exchange_strong(t, mine, std::memory_order_acq_rel)) {
    munmap(m, sizeof(Entry) * kCapacity);
    return t;
  }
  stats::g.report.store(reinterpret_cast<uintptr_t>(mine), std::memory_order_release);
  return mine;
}

}  // namespace

Entry* take(int fd, uint8_t role, uint8_t flags) noexcept {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino == 0) return nullptr;
  Entry* t = table();
  if (!t) return nullptr;
  Entry* e = nullptr;
  uint64_t head = g_free.load(std::memory_order_acquire);
  while (static_cast<uint32_t>(head) != 0) {
    Entry* top = &t[static_cast<uint32_t>(head) - 1];
    const uint64_t next = ((head >> 32) + 1) << 32 | top->next_free.load(std::memory_order_relaxed);
    if (g_free.compare_exchange_weak(head, next, std::memory_order_acq_rel)) {
      e = top;
      break;
    }
  }
  if (!e) {
    const uint32_t i = g_used.fetch_add(1, std::memory_order_relaxed);
    if (i >= kCapacity) {
      g_used.fetch_sub(1, std::memory_order_relaxed);
      return nullptr;
    }
    e = &t[i];
  }
  e->role.store(role, std::memory_order_relaxed);
  e->state.store(kKernel, std::memory_order_relaxed);
  e->flags.store(flags, std::memory_order_relaxed);
  e->why.store(0, std::memory_order_relaxed);
  e->rdma_sent.store(0, std::memory_order_relaxed);
  e->rdma_received.store(0, std::memory_order_relaxed);
  e->registered.store(0, std::memory_order_relaxed);
  e->qp.store(0, std::memory_order_relaxed);
  e->inode.store(st.st_ino, std::memory_order_release);
  return e;
}

void give_back(Entry* e) noexcept {
  Entry* t = g_table.load(std::memory_order_acquire);
  if (!e || !t) return;
  e->inode.store(0, std::memory_order_release);
  const uint32_t index = static_cast<uint32_t>(e - t) + 1;
  uint64_t head = g_free.load(std::memory_order_relaxed);
  do {
    e->next_free.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
  } while (!g_free.compare_exchange_weak(head, (head & ~uint64_t{0xffffffff}) | index, std::memory_order_acq_rel));
}

void why(Entry* e, const std::atomic<uint64_t>& counter) noexcept {
  if (e) e->why.store(static_cast<uint16_t>(stats::index_of(counter) + 1), std::memory_order_relaxed);
}

}  // namespace ferry::conn_report
