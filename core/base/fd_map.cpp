#include "core/base/fd_map.h"

#include <sys/mman.h>

#include <atomic>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace ferry::fdmap_detail {

namespace {
// The first nodes (each map's top, mid and first leaf, reserved at start: 104 KiB for
// the two maps) come from libferry's .bss. Nodes mapped on their own were a mapping
// of their own too, with private pages as soon as the table wrote one; each fork
// copies such a mapping's bookkeeping (its anon_vma chain), which costs it more than
// the pages in it. .bss is a mapping ferry has anyway, and its pages nobody writes are
// the kernel's zero pages, as a fresh mapping's are. Its pages are handed out once and
// never reused, so they stay zero until a node's owner writes them.
constexpr size_t kArena = 128 * 1024;
alignas(4096) unsigned char g_arena[kArena];
std::atomic<size_t> g_arena_used{0};
constexpr size_t kPage = 4096;
}  // namespace

bool in_arena(const void* p) noexcept {
  auto* c = static_cast<const unsigned char*>(p);
  return c >= g_arena && c < g_arena + kArena;
}

void* map_pages(size_t bytes) noexcept {
  const size_t whole = (bytes + kPage - 1) / kPage * kPage;
  size_t used = g_arena_used.load(std::memory_order_relaxed);
  while (whole <= kArena - used) {
    if (g_arena_used.compare_exchange_weak(used, used + whole, std::memory_order_relaxed)) return g_arena + used;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#if defined(__SANITIZE_ADDRESS__)
  __lsan_register_root_region(p, bytes);  // the leak checker scans the heap, not these
#endif
  return p;
}

void unmap_pages(void* p, size_t bytes) noexcept {
  if (in_arena(p)) return;  // never handed out again: its pages stay the node's
#if defined(__SANITIZE_ADDRESS__)
  __lsan_unregister_root_region(p, bytes);
#endif
  ::munmap(p, bytes);
}

}  // namespace ferry::fdmap_detail
