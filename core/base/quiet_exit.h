// Keeps the exit-time destructors of the libraries ferry loads for RDMA from running.
//
// rdma-core, once ferry loads it (core/rdma/rdma_lib.h), is mapped in the process and in
// every child it forks. At each exit the dynamic linker runs every mapped library's
// destructors: libnl-route's 68 (each unregisters a cache or link type from a list in
// the heap) and, in libibverbs, librdmacm, libnl-3 and each provider, the compiler's
// own (__do_global_dtors_aux) and _fini. In a forked child that exits, each of those
// is a page fault on code it never ran (a child inherits no page-table entries for
// code) or a copy of a data page, about 45 per child in the test bed, where faults
// are dear: a forking server listening for RDMA forked at 0.59 of the plain rate.
// None of that work outlives the process: the lists are in memory the exit discards,
// and the kernel releases every RDMA object and descriptor of an exiting process.
// (Whatever the libraries registered with atexit still runs: exit() calls those
// before the dynamic linker's destructors.)
//
// So after loading them ferry rewrites, in each library its load mapped, the two
// entries of the dynamic section that name its destructors (DT_FINI_ARRAYSZ to 0,
// DT_FINI to a function that does nothing), which is where the dynamic linker looks at
// exit. Only libraries that ferry's load mapped and that are rdma-core's are touched:
// a library the program mapped, even one of these, keeps its destructors.
#pragma once

#include <link.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::quiet_exit {

// The objects mapped when it was made, to tell later which were mapped since.
class Mapped {
 public:
  Mapped() noexcept;
  bool had(uintptr_t base, std::string_view path) const noexcept;

 private:
  struct Object {
    uintptr_t base;
    std::string path;
  };
  std::vector<Object> objects_;
};

// Whether `path` names a library ferry's load of rdma-core maps: libibverbs, librdmacm,
// libnl-3, libnl-route-3, or a provider (lib*-rdmav*.so in a libibverbs directory).
bool rdma_core(std::string_view path) noexcept;

// What to write into an object's dynamic section (its entries up to DT_NULL) so that
// its exit runs `none` and no destructor array: each `at` is the address of a d_un to
// overwrite with `value`, or 0 when the object has no such entry.
struct Patch {
  uintptr_t fini_at = 0;
  ElfW(Addr) fini_value = 0;
  uintptr_t array_size_at = 0;
};
Patch plan(const ElfW(Dyn)* dynamic, ElfW(Addr) base, ElfW(Addr) none) noexcept;

// Silences every object mapped since `before` whose path `pick` accepts. Returns how
// many it silenced, or -1 when the kernel refused a write.
int silence(const Mapped& before, bool (*pick)(std::string_view)) noexcept;

}  // namespace ferry::quiet_exit
