#include "core/base/stats.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <utility>
#include <vector>

namespace ferry::stats {

// The first thing on the fork page (core/base/fork_page.ld), where read_process() finds it.
FERRY_FORK_COUNTERS alignas(kForkPage) constinit Counters g;

std::string format(const Counters& c) {
  std::string out;
  char line[192];
  snprintf(line, sizeof line, "ferry[%llu] counters:\n", static_cast<unsigned long long>(c.pid));
  out += line;
#define FERRY_STAT_LINE(name, desc)                                                      \
  snprintf(line, sizeof line, "  %-22s %14llu  # %s\n", #name,                           \
           static_cast<unsigned long long>(c.name.load(std::memory_order_relaxed)), desc); \
  out += line;
  FERRY_STATS_LIST(FERRY_STAT_LINE)
#undef FERRY_STAT_LINE
  return out;
}

int index_of(const std::atomic<uint64_t>& c) noexcept {
  int i = 0;
#define FERRY_STAT_INDEX(name, desc) \
  if (&c == &g.name) return i;       \
  ++i;
  FERRY_STATS_LIST(FERRY_STAT_INDEX)
#undef FERRY_STAT_INDEX
  return -1;
}

const char* name_at(int index) noexcept {
  static constexpr const char* kNames[] = {
#define FERRY_STAT_NAME(name, desc) #name,
      FERRY_STATS_LIST(FERRY_STAT_NAME)
#undef FERRY_STAT_NAME
  };
  return index >= 0 && index < static_cast<int>(sizeof kNames / sizeof kNames[0]) ? kNames[index] : nullptr;
}

bool all_zero(const Counters& c) noexcept {
  bool zero = true;
#define FERRY_STAT_IS_ZERO(name, desc) zero = zero && c.name.load(std::memory_order_relaxed) == 0;
  FERRY_STATS_LIST(FERRY_STAT_IS_ZERO)
#undef FERRY_STAT_IS_ZERO
  return zero;
}

void after_fork_child() noexcept {
#define FERRY_STAT_ZERO(name, desc) g.name.store(0, std::memory_order_relaxed);
  FERRY_STATS_LIST(FERRY_STAT_ZERO)
#undef FERRY_STAT_ZERO
  g.pid = 0;
}

namespace {

// Where `path`'s fork page section (core/base/fork_page.ld) is, relative to the address of
// its first byte's mapping; false if the file is not an ELF object that has one.
bool fork_page_of(const std::string& path, uint64_t& offset) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool found = false;
  Elf64_Ehdr eh;
  if (pread(fd, &eh, sizeof eh, 0) == static_cast<ssize_t>(sizeof eh) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_shentsize == sizeof(Elf64_Shdr) &&
      eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_shstrndx < eh.e_shnum && eh.e_shnum < 4096 && eh.e_phnum < 256) {
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    std::vector<Elf64_Phdr> ph(eh.e_phnum);
    const auto sh_bytes = static_cast<ssize_t>(sh.size() * sizeof(Elf64_Shdr));
    const auto ph_bytes = static_cast<ssize_t>(ph.size() * sizeof(Elf64_Phdr));
    if (pread(fd, sh.data(), sh_bytes, static_cast<off_t>(eh.e_shoff)) == sh_bytes &&
        pread(fd, ph.data(), ph_bytes, static_cast<off_t>(eh.e_phoff)) == ph_bytes) {
      // The mapping of the file's first byte is the PT_LOAD segment at file offset 0.
      uint64_t first = UINT64_MAX;
      for (const auto& p : ph)
        if (p.p_type == PT_LOAD && p.p_offset == 0) first = p.p_vaddr;
      const Elf64_Shdr& names = sh[eh.e_shstrndx];
      constexpr char kName[] = "ferry_fork_data";
      for (const auto& h : sh) {
        char name[sizeof kName] = {};
        if (first == UINT64_MAX || h.sh_name >= names.sh_size ||
            pread(fd, name, sizeof name, static_cast<off_t>(names.sh_offset + h.sh_name)) != sizeof name ||
            memcmp(name, kName, sizeof kName) != 0)
          continue;
        offset = h.sh_addr - first;
        found = true;
        break;
      }
    }
  }
  close(fd);
  return found;
}

}  // namespace

std::string read_process(long pid, Counters& out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/maps", pid);
  FILE* maps = fopen(path, "re");
  if (!maps) return std::string("cannot read ") + path + ": " + strerror(errno);
  // Each object the process mapped from a file: where its first byte is.
  std::vector<std::pair<uintptr_t, std::string>> objects;
  char line[4096];
  while (fgets(line, sizeof line, maps)) {
    uintptr_t start = 0;
    unsigned long long file_offset = 0;
    int name_at = 0;
    if (sscanf(line, "%" SCNxPTR "-%*[0-9a-f] %*s %llx %*s %*s %n", &start, &file_offset, &name_at) < 2 ||
        name_at == 0 || file_offset != 0 || line[name_at] != '/')
      continue;
    std::string name(line + name_at);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    bool seen = false;
    for (const auto& o : objects) seen = seen || o.second == name;
    if (!seen) objects.emplace_back(start, name);
  }
  fclose(maps);
  snprintf(path, sizeof path, "/proc/%ld/mem", pid);
  int mem = -1;
  std::string why = "process " + std::to_string(pid) + " does not run ferry (no object with ferry's counters)";
  for (const auto& [start, name] : objects) {
    uint64_t offset = 0;
    // Through the process's root: the path is the one it sees.
    if (!fork_page_of("/proc/" + std::to_string(pid) + "/root" + name, offset)) continue;
    if (mem < 0 && (mem = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      return std::string("cannot open ") + path + ": " + strerror(errno);
    ssize_t n = pread(mem, &out, sizeof out, static_cast<off_t>(start + offset));
    if (n != static_cast<ssize_t>(sizeof out)) {
      why = std::string("cannot read the counters: ") + strerror(errno);
      continue;
    }
    if (out.magic != kMagic) {
      why = "the counters have an unknown layout (another ferry version?)";
      continue;
    }
    close(mem);
    out.pid = static_cast<uint64_t>(pid);
    return {};
  }
  if (mem >= 0) close(mem);
  return why;
}

}  // namespace ferry::stats
