#include "core/base/quiet_exit.h"

#include "core/base/fork_path.h"
#include "core/base/self_mem.h"

#include <elf.h>

#include <algorithm>

namespace ferry::quiet_exit {

namespace {

// What an exit runs instead of a silenced library's destructors: on the fork path's
// text, which a forked child has mapped already.
FERRY_FORK_PATH void none() noexcept {}

// The dynamic section of a mapped object, or null.
const ElfW(Dyn)* dynamic_of(const dl_phdr_info& info) noexcept {
  for (int i = 0; i < info.dlpi_phnum; ++i)
    if (info.dlpi_phdr[i].p_type == PT_DYNAMIC)
      return reinterpret_cast<const ElfW(Dyn)*>(info.dlpi_addr + info.dlpi_phdr[i].p_vaddr);
  return nullptr;
}

std::string_view name_of(const dl_phdr_info& info) noexcept {
  return info.dlpi_name ? std::string_view(info.dlpi_name) : std::string_view();
}

}  // namespace

Mapped::Mapped() noexcept {
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* self) {
        static_cast<Mapped*>(self)->objects_.push_back({info->dlpi_addr, std::string(name_of(*info))});
        return 0;
      },
      this);
}

bool Mapped::had(uintptr_t base, std::string_view path) const noexcept {
  return std::any_of(objects_.begin(), objects_.end(),
                     [&](const Object& o) { return o.base == base && o.path == path; });
}

bool rdma_core(std::string_view path) noexcept {
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
  const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view lib : {"libibverbs.so", "librdmacm.so", "libnl-3.so", "libnl-route-3.so"})
    if (file.substr(0, lib.size()) == lib) return true;
  const bool in_providers = dir.size() >= 11 && dir.substr(dir.size() - 11) == "/libibverbs";
  return in_providers && file.substr(0, 3) == "lib" && file.find("-rdmav") != std::string_view::npos;
}

Patch plan(const ElfW(Dyn)* dynamic, ElfW(Addr) base, ElfW(Addr) none) noexcept {
  Patch p;
  for (const ElfW(Dyn)* d = dynamic; d && d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_FINI) {
      p.fini_at = reinterpret_cast<uintptr_t>(&d->d_un);
      p.fini_value = none - base;  // the linker calls base + d_ptr
    } else if (d->d_tag == DT_FINI_ARRAYSZ) {
      p.array_size_at = reinterpret_cast<uintptr_t>(&d->d_un);
    }
  }
  return p;
}

int silence(const Mapped& before, bool (*pick)(std::string_view)) noexcept {
  struct Walk {
    const Mapped& before;
    bool (*pick)(std::string_view);
    SelfMem mem;
    int silenced = 0;
    bool refused = false;
  } w{before, pick, {}, 0, false};
  if (!w.mem.ok()) return -1;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        Walk& w = *static_cast<Walk*>(data);
        const std::string_view path = name_of(*info);
        if (w.before.had(info->dlpi_addr, path) || !w.pick(path)) return 0;
        const Patch p = plan(dynamic_of(*info), info->dlpi_addr, reinterpret_cast<ElfW(Addr)>(&none));
        // Only what differs is written (a write copies the page, in a child too).
        auto set = [&](uintptr_t at, ElfW(Addr) value) {
          return !at || *reinterpret_cast<const ElfW(Addr)*>(at) == value || w.mem.write(at, &value, sizeof value);
        };
        const bool ok = set(p.array_size_at, 0) && set(p.fini_at, p.fini_value);
        if (ok) ++w.silenced;
        else w.refused = true;
        return 0;
      },
      &w);
  return w.refused ? -1 : w.silenced;
}

}  // namespace ferry::quiet_exit
