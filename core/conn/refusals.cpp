#include "core/conn/refusals.h"

#include "core/base/user_shm.h"
#include "core/conn/endpoint.h"

#include <netinet/in.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>

namespace ferry::refusals {

Key key_of(const sockaddr_storage& peer) noexcept {
  sockaddr_storage a = peer;
  endpoint::unmap(a);
  Key k;
  k.family = static_cast<uint8_t>(a.ss_family);
  k.port = endpoint::port_of(reinterpret_cast<const sockaddr*>(&a));
  if (a.ss_family == AF_INET)
    memcpy(k.addr, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, 4);
  else if (a.ss_family == AF_INET6)
    memcpy(k.addr, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, 16);
  return k;
}

namespace {

void pack(const Key& k, uint64_t (&w)[(sizeof(Key) + 7) / 8]) noexcept {
  memset(w, 0, sizeof w);
  memcpy(w, &k, sizeof k);
}

}  // namespace

bool Table::read(const Slot& s, Key& key, int64_t& until) noexcept {
  const uint32_t before = s.seq.load(std::memory_order_acquire);
  if (before & 1) return false;
  uint64_t w[kWords];
  for (int i = 0; i < kWords; ++i) w[i] = s.key[i].load(std::memory_order_relaxed);
  until = s.until.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.seq.load(std::memory_order_relaxed) != before) return false;
  memcpy(&key, w, sizeof key);
  return true;
}

bool Table::holds(const Key& k, int64_t now_ns) const noexcept {
  for (const Slot& s : slots_) {
    Key key;
    int64_t until;
    if (read(s, key, until) && until > now_ns && key == k) return true;
  }
  return false;
}

void Table::note(const Key& k, int64_t until_ns) noexcept {
  Slot* use = nullptr;
  int64_t use_until = INT64_MAX;
  for (Slot& s : slots_) {
    Key key;
    int64_t until;
    if (!read(s, key, until)) continue;
    if (key == k) {
      use = &s;
      break;
    }
    if (!use || until < use_until) {
      use = &s;
      use_until = until;
    }
  }
  if (!use) return;
  uint32_t seq = use->seq.load(std::memory_order_relaxed);
  if ((seq & 1) || !use->seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return;
  std::atomic_thread_fence(std::memory_order_release);
  uint64_t w[kWords];
  pack(k, w);
  for (int i = 0; i < kWords; ++i) use->key[i].store(w[i], std::memory_order_relaxed);
  use->until.store(until_ns, std::memory_order_relaxed);
  use->seq.store(seq + 2, std::memory_order_release);
}

namespace {

int64_t now_ns() noexcept {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

std::atomic<Table*> g_table{nullptr};

// Mapped at the first use: a process that never connects maps nothing.
Table& table() noexcept {
  if (Table* t = g_table.load(std::memory_order_acquire)) return *t;
  // Addresses name other hosts in another network namespace: one file each.
  struct stat ns;
  const unsigned long ns_id = stat("/proc/self/ns/net", &ns) == 0 ? static_cast<unsigned long>(ns.st_ino) : 0;
  char path[96];
  snprintf(path, sizeof path, "/dev/shm/ferry-refusals-1.%u.%lu", static_cast<unsigned>(geteuid()), ns_id);
  static Table own;  // zero-initialized: every slot free
  Table* t = static_cast<Table*>(user_shm::map(path, sizeof(Table)));
  Table* want = t ? t : &own;
  Table* expected = nullptr;
  if (!g_table.compare_exchange_strong(expected, want)) {
    if (t) munmap(t, sizeof(Table));
    return *expected;
  }
  return *want;
}

}  // namespace

bool refused_lately(const sockaddr_storage& peer) noexcept { return table().holds(key_of(peer), now_ns()); }

void note_refusal(const sockaddr_storage& peer) noexcept { table().note(key_of(peer), now_ns() + kMemoryNs); }

}  // namespace ferry::refusals
