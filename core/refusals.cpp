#include "core/refusals.h"

#include "core/endpoint.h"
#include "core/lock.h"

#include <netinet/in.h>

#include <cstring>
#include <ctime>
#include <mutex>

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

bool Table::holds(const Key& k, int64_t now_ns) const noexcept {
  for (const Slot& s : slots_)
    if (s.until > now_ns && s.key == k) return true;
  return false;
}

void Table::note(const Key& k, int64_t until_ns) noexcept {
  Slot* use = &slots_[0];
  for (Slot& s : slots_) {
    if (s.key == k) {
      use = &s;
      break;
    }
    if (s.until < use->until) use = &s;
  }
  use->key = k;
  use->until = until_ns;
}

namespace {

Lock g_mu;  // a Lock: a forked child finds it free even if a parent's thread held it
Table g_table;

int64_t now_ns() noexcept {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

}  // namespace

bool refused_lately(const sockaddr_storage& peer) noexcept {
  const Key k = key_of(peer);
  const int64_t now = now_ns();
  std::lock_guard<Lock> lock(g_mu);
  return g_table.holds(k, now);
}

void note_refusal(const sockaddr_storage& peer) noexcept {
  const Key k = key_of(peer);
  const int64_t until = now_ns() + kMemoryNs;
  std::lock_guard<Lock> lock(g_mu);
  g_table.note(k, until);
}

}  // namespace ferry::refusals
