#include "core/base/self_mem.h"

#include "core/base/libc.h"

#include <fcntl.h>
#include <unistd.h>

namespace ferry {

SelfMem::SelfMem() noexcept : fd_(::open("/proc/self/mem", O_RDWR | O_CLOEXEC)) {}

SelfMem::~SelfMem() {
  if (fd_ >= 0) real.close(fd_);
}

bool SelfMem::read(uintptr_t at, void* to, size_t n) noexcept {
  return fd_ >= 0 && ::pread(fd_, to, n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
}

bool SelfMem::write(uintptr_t at, const void* from, size_t n) noexcept {
  return fd_ >= 0 && ::pwrite(fd_, from, n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
}

}  // namespace ferry
