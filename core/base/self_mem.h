// Reads and writes this process's own memory whatever a mapping's protection, as a
// debugger does (through /proc/self/mem): a write into a read-only mapping gives it a
// private copy of that page and leaves the protection as it is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

class SelfMem {
 public:
  SelfMem() noexcept;
  ~SelfMem();
  SelfMem(const SelfMem&) = delete;
  SelfMem& operator=(const SelfMem&) = delete;

  // False when /proc/self/mem cannot be opened; every call then fails.
  bool ok() const noexcept { return fd_ >= 0; }
  bool read(uintptr_t at, void* to, size_t n) noexcept;
  // False when the kernel refuses (one that forbids forced writes to /proc/PID/mem).
  bool write(uintptr_t at, const void* from, size_t n) noexcept;

 private:
  int fd_;
};

}  // namespace ferry
