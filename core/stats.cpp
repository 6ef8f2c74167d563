#include "core/stats.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ferry::stats {

// The first thing on the fork page (core/fork_page.ld).
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

void publish(long pid) noexcept {
  int fd = memfd_create("ferry-stats", MFD_CLOEXEC);
  if (fd < 0) return;
  g.pid = static_cast<uint64_t>(pid);
  // The whole page: the rest of the fork data moves with the counters. Writes made
  // between the copy and the switch would be lost; this runs before the program has
  // threads, and before anything else writes the page.
  char* page = reinterpret_cast<char*>(&g);
  asm("" : "+r"(page));  // the page, not just g (which the compiler knows the size of)
  if (pwrite(fd, page, kForkPage, 0) == static_cast<ssize_t>(kForkPage))
    mmap(page, kForkPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
  close(fd);
}

void after_fork_child() noexcept {
#define FERRY_STAT_ZERO(name, desc) g.name.store(0, std::memory_order_relaxed);
  FERRY_STATS_LIST(FERRY_STAT_ZERO)
#undef FERRY_STAT_ZERO
  g.pid = 0;
}

std::string read_process(long pid, Counters& out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/maps", pid);
  FILE* maps = fopen(path, "re");
  if (!maps) return std::string("cannot read ") + path + ": " + strerror(errno);
  uintptr_t start = 0, end = 0;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, maps)) {
    if (strstr(line, "/memfd:ferry-stats") && sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &start, &end) == 2 &&
        end - start >= sizeof(Counters))
      found = true;
  }
  fclose(maps);
  if (!found) return "process " + std::to_string(pid) + " does not run ferry (no ferry-stats mapping)";
  snprintf(path, sizeof path, "/proc/%ld/mem", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open ") + path + ": " + strerror(errno);
  ssize_t n = pread(fd, &out, sizeof out, static_cast<off_t>(start));
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(sizeof out)) return std::string("cannot read the counters: ") + strerror(err);
  if (out.magic != kMagic) return "the counters have an unknown layout (another ferry version?)";
  out.pid = static_cast<uint64_t>(pid);
  return {};
}


}  // namespace ferry::stats
