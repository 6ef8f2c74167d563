#include "core/shared_text.h"

#include "core/self_mem.h"

#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

// The end of the hot text (core/fork_page.ld).
extern "C" const char ferry_hot_text_end[];

namespace ferry::shared_text {

namespace {

struct Object {
  uintptr_t self = 0;  // an address inside libferry
  Segment ro[8];       // its read-only PT_LOAD segments
  int n = 0;
  uintptr_t unwind = 0;  // PT_GNU_EH_FRAME
};

uintptr_t round_up(uintptr_t a, uintptr_t page) { return (a + page - 1) & ~(page - 1); }

int find(dl_phdr_info* info, size_t, void* data) {
  auto* o = static_cast<Object*>(data);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + p.p_vaddr;
    if (p.p_type == PT_LOAD && o->self >= lo && o->self < lo + p.p_memsz) ours = true;
  }
  if (!ours) return 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + p.p_vaddr;
    if (p.p_type == PT_GNU_EH_FRAME) o->unwind = lo;
    if (p.p_type != PT_LOAD || (p.p_flags & PF_W) || p.p_memsz == 0 || o->n == 8) continue;
    o->ro[o->n++] = Segment{lo & ~(page - 1), round_up(lo + p.p_memsz, page)};
  }
  return 1;
}

}  // namespace

bool part_of(Segment seg, uintptr_t hot_end, uintptr_t unwind, uintptr_t page, Part& out) noexcept {
  uintptr_t split = seg.end;
  if (hot_end > seg.start && hot_end <= seg.end)
    split = round_up(hot_end, page);
  else if (unwind >= seg.start && unwind < seg.end)
    split = round_up(unwind, page);
  if (split <= seg.start) return false;
  out = Part{seg.start, split < seg.end ? split : seg.end, seg.end};
  return true;
}

bool prepare() noexcept {
  Object o;
  o.self = reinterpret_cast<uintptr_t>(&prepare);
  dl_iterate_phdr(find, &o);
  if (o.n == 0) return false;
  SelfMem mem;
  if (!mem.ok()) return false;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto hot_end = reinterpret_cast<uintptr_t>(ferry_hot_text_end);
  bool all = true;
  for (int i = 0; i < o.n; ++i) {
    Part part;
    if (!part_of(o.ro[i], hot_end, o.unwind, page, part)) continue;
    // Split first: the private page then belongs to the hot part's mapping alone. A
    // kernel without huge pages refuses the flag: the whole mapping is shared then.
    if (part.split < part.end &&
        madvise(reinterpret_cast<void*>(part.split), part.end - part.split, MADV_NOHUGEPAGE) != 0)
      all = false;
    unsigned char b;
    if (!mem.read(part.start, &b, 1) || !mem.write(part.start, &b, 1)) all = false;
  }
  return all;
}

}  // namespace ferry::shared_text
