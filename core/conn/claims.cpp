#include "core/conn/claims.h"

#include "core/base/libc.h"
#include "core/base/user_shm.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>

namespace ferry::claims {
namespace {

std::atomic<Table*> g_table{nullptr};

bool same(const char (&stored)[kKeySize], uint8_t stored_len, std::string_view key) {
  return key.size() == stored_len && memcmp(stored, key.data(), key.size()) == 0;
}

}  // namespace

size_t Table::home(std::string_view key) const noexcept {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : key) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return static_cast<size_t>(h % kSlots);
}

bool Table::read(size_t i, std::string_view key, int64_t now, Slot& out) const noexcept {
  const Slot& s = slots_[i];
  uint32_t before = s.seq.load(std::memory_order_acquire);
  if (before & 1) return false;
  // Plain reads of a slot another process may be writing: the sequence check below
  // throws away whatever a concurrent writer tore.
  out.pid = s.pid;
  out.port = s.port;
  out.expires = s.expires;
  out.key_len = s.key_len;
  memcpy(out.key, s.key, kKeySize);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.seq.load(std::memory_order_relaxed) != before) return false;
  return out.pid != 0 && out.expires > now && same(out.key, out.key_len, key);
}

bool Table::claim(std::string_view key, const Claim& who, int64_t now, int64_t expires) noexcept {
  if (key.size() >= kKeySize || who.pid == 0) return false;
  const size_t first = home(key);
  // The key's own slot if it has one (a newer claim replaces it), else a free one.
  size_t target = kSlots;
  for (size_t k = 0; k < kProbe; ++k) {
    const size_t i = (first + k) % kSlots;
    Slot seen;
    if (read(i, key, now, seen)) {
      target = i;
      break;
    }
    const Slot& s = slots_[i];
    if (target == kSlots && !(s.seq.load(std::memory_order_relaxed) & 1) &&
        (s.pid == 0 || s.expires <= now))
      target = i;
  }
  if (target == kSlots) return false;
  Slot& s = slots_[target];
  uint32_t seq = s.seq.load(std::memory_order_relaxed);
  if ((seq & 1) || !s.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return false;
  std::atomic_thread_fence(std::memory_order_release);
  if (s.pid != 0 && s.expires > now && !same(s.key, s.key_len, key)) {  // taken since we looked
    s.seq.store(seq + 2, std::memory_order_release);
    return false;
  }
  s.pid = who.pid;
  s.port = who.port;
  s.expires = expires;
  memset(s.key, 0, kKeySize);
  memcpy(s.key, key.data(), key.size());
  s.key_len = static_cast<uint8_t>(key.size());
  s.seq.store(seq + 2, std::memory_order_release);
  return true;
}

bool Table::find(std::string_view key, int64_t now, Claim& out) const noexcept {
  const size_t first = home(key);
  for (size_t k = 0; k < kProbe; ++k) {
    Slot seen;
    if (read((first + k) % kSlots, key, now, seen)) {
      out.pid = seen.pid;
      out.port = seen.port;
      return true;
    }
  }
  return false;
}

void Table::drop(std::string_view key, int32_t pid) noexcept {
  const size_t first = home(key);
  for (size_t k = 0; k < kProbe; ++k) {
    Slot& s = slots_[(first + k) % kSlots];
    Slot seen;
    if (!read((first + k) % kSlots, key, INT64_MIN, seen) || seen.pid != pid) continue;
    uint32_t seq = s.seq.load(std::memory_order_relaxed);
    if ((seq & 1) || !s.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return;
    if (s.pid == pid && same(s.key, s.key_len, key)) s.pid = 0;
    s.seq.store(seq + 2, std::memory_order_release);
    return;
  }
}

Table* shared() noexcept { return g_table.load(std::memory_order_acquire); }

Table* map_named(const char* path) noexcept {
  // A new file reads as zeros: every slot free, as in a fresh anonymous table.
  return static_cast<Table*>(user_shm::map(path, sizeof(Table)));
}

Table* make_shared(bool per_user) noexcept {
  if (Table* t = shared()) return t;
  Table* t = nullptr;
  if (per_user) {
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/ferry-claims-2.%u", static_cast<unsigned>(geteuid()));
    t = map_named(path);
  }
  if (!t) {
    void* p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    // Fresh anonymous memory is zero: every slot is free, no page touched until used.
    t = static_cast<Table*>(p);
  }
  Table* expected = nullptr;
  if (!g_table.compare_exchange_strong(expected, t)) {
    munmap(t, sizeof(Table));
    return expected;
  }
  return t;
}

}  // namespace ferry::claims
