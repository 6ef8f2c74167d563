#include "core/shared_text.h"

#include "core/self_mem.h"

#include <link.h>
#include <unistd.h>

#include <cstdint>

namespace ferry::shared_text {

namespace {

struct Segments {
  uintptr_t self = 0;  // an address inside libferry
  uintptr_t start[8] = {};
  int n = 0;
};

// The first page of each read-only PT_LOAD segment of the object that holds `self`.
int find(dl_phdr_info* info, size_t, void* data) {
  auto* seg = static_cast<Segments*>(data);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + p.p_vaddr;
    if (seg->self >= lo && seg->self < lo + p.p_memsz) ours = true;
  }
  if (!ours) return 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum && seg->n < 8; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD || (p.p_flags & PF_W) || p.p_memsz == 0) continue;
    seg->start[seg->n++] = (info->dlpi_addr + p.p_vaddr) & ~(page - 1);
  }
  return 1;
}

}  // namespace

bool prepare() noexcept {
  Segments seg;
  seg.self = reinterpret_cast<uintptr_t>(&prepare);
  dl_iterate_phdr(find, &seg);
  if (seg.n == 0) return false;
  SelfMem mem;
  if (!mem.ok()) return false;
  bool all = true;
  for (int i = 0; i < seg.n; ++i) {
    unsigned char b;
    all = all && mem.read(seg.start[i], &b, 1) && mem.write(seg.start[i], &b, 1);
  }
  return all;
}

}  // namespace ferry::shared_text
