#include "core/shared_text.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ferry::shared_text {
namespace {

// The resident size, in kB, of this process's mapping that holds `p` (from smaps).
long rss_of(const void* p) {
  FILE* f = fopen("/proc/self/smaps", "re");
  if (!f) return -1;
  const auto at = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool in = false;
  long rss = -1;
  while (fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    // A mapping's first line starts with its (lowercase hex) address; its fields with
    // a capital letter.
    if (!isupper(static_cast<unsigned char>(line[0])) && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = at >= lo && at < hi;
      continue;
    }
    if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) break;
  }
  fclose(f);
  return rss;
}

// Maps every page of the mapping that holds `p` into this process's page tables.
void touch_all(const void* p) {
  FILE* f = fopen("/proc/self/maps", "re");
  ASSERT_NE(f, nullptr);
  const auto at = reinterpret_cast<uintptr_t>(p);
  char line[512];
  while (fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2 || at < lo || at >= hi) continue;
    volatile unsigned char sink = 0;
    for (uintptr_t a = lo; a < hi; a += 4096) sink = sink + *reinterpret_cast<const volatile unsigned char*>(a);
  }
  fclose(f);
}

// What a child forked now finds of that mapping already in its page tables, in kB.
long child_rss(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    long rss = rss_of(p);
    _exit(write(fds[1], &rss, sizeof rss) == sizeof rss ? 0 : 1);
  }
  long rss = -1;
  if (read(fds[0], &rss, sizeof rss) != sizeof rss) rss = -1;
  waitpid(pid, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  return rss;
}

TEST(SharedText, AForkedChildStartsWithTheCodeItsParentMapped) {
  const void* code = reinterpret_cast<const void*>(&prepare);
  touch_all(code);
  const long parent = rss_of(code);
  ASSERT_GT(parent, 256) << "the test binary's code mapping is too small to tell";
  // Before: a child has only what it touched since the fork.
  const long before = child_rss(code);
  ASSERT_TRUE(prepare());
  touch_all(code);
  const long after = child_rss(code);
  EXPECT_LT(before, parent / 2) << "parent " << parent << " kB";
  EXPECT_GE(after, parent * 9 / 10) << "parent " << parent << " kB, before " << before << " kB";
}

}  // namespace
}  // namespace ferry::shared_text
