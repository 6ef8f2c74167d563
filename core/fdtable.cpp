#include "core/fdtable.h"

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace ferry::fdmap_detail {

FERRY_FORK_PATH TableHolder::~TableHolder() {}

// Among the data a forked child writes anyway (core/fork_path.h): a bind or an
// unbind writes the map's size.
FERRY_FORK_DATA constinit TableHolder g_table;

void* map_pages(size_t bytes) noexcept {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#if defined(__SANITIZE_ADDRESS__)
  __lsan_register_root_region(p, bytes);  // the leak checker scans the heap, not these
#endif
  return p;
}

void unmap_pages(void* p, size_t bytes) noexcept {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_unregister_root_region(p, bytes);
#endif
  ::munmap(p, bytes);
}

}  // namespace ferry::fdmap_detail
