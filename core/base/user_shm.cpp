#include "core/base/user_shm.h"

#include "core/base/libc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry::user_shm {

void* map(const char* path, size_t size) noexcept {
  const int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return nullptr;
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == geteuid() &&
      (st.st_mode & 077) == 0 &&
      (st.st_size >= static_cast<off_t>(size) || ftruncate(fd, static_cast<off_t>(size)) == 0))
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  real.close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace ferry::user_shm
