#include "core/shared_text.h"

#include "core/stats.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

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

// The hot text (here: a fork-path function's) is in a child's page tables from the
// start; the rest of the code (here: prepare's) only as the child touches it.
TEST(SharedText, AForkedChildStartsWithTheHotCodeItsParentMapped) {
  const void* hot = reinterpret_cast<const void*>(&stats::after_fork_child);
  const void* cold = reinterpret_cast<const void*>(&prepare);
  touch_all(hot);
  touch_all(cold);
  const long parent_hot = rss_of(hot);
  const long parent_cold = rss_of(cold);
  ASSERT_GT(parent_cold, 256) << "the test binary's code mapping is too small to tell";
  const long before = child_rss(hot);
  ASSERT_TRUE(prepare());
  touch_all(hot);
  touch_all(cold);
  const long hot_after = rss_of(hot);
  const long cold_after = rss_of(cold);
  // Split: the hot text is a mapping of its own now, smaller than the code was.
  EXPECT_LT(hot_after, parent_hot) << "hot " << parent_hot << " kB";
  EXPECT_GT(hot_after, 0);
  const long child_hot = child_rss(hot);
  const long child_cold = child_rss(cold);
  EXPECT_LT(before, parent_hot / 2) << "parent " << parent_hot << " kB";
  EXPECT_EQ(child_hot, hot_after) << "parent's hot text " << hot_after << " kB, before " << before << " kB";
  EXPECT_LT(child_cold, cold_after / 2) << "parent's other code " << cold_after << " kB";
}

// The part of seg that part_of shares, as "start split end" in hex, or "none".
std::string shared(Segment seg, uintptr_t hot_end, uintptr_t unwind) {
  Part p;
  if (!part_of(seg, hot_end, unwind, 4096, p)) return "none";
  char out[64];
  snprintf(out, sizeof out, "%lx %lx %lx", static_cast<unsigned long>(p.start), static_cast<unsigned long>(p.split),
           static_cast<unsigned long>(p.end));
  return out;
}

TEST(SharedText, EachSegmentSharesItsHotPartOnly) {
  // The text: up to the hot text's end, rounded up.
  EXPECT_EQ(shared(Segment{0xa000, 0x7d000}, 0x164c9, 0x82e14), "a000 17000 7d000");
  // The constants: up to the unwind tables.
  EXPECT_EQ(shared(Segment{0x7d000, 0x9d000}, 0x164c9, 0x82e14), "7d000 83000 9d000");
  // Headers and symbol tables: all of it.
  EXPECT_EQ(shared(Segment{0x0, 0xa000}, 0x164c9, 0x82e14), "0 a000 a000");
  // Hot text that fills its segment: nothing to split.
  EXPECT_EQ(shared(Segment{0xa000, 0x17000}, 0x16ff0, 0), "a000 17000 17000");
  // Unwind tables at a segment's very start: no constants before them.
  EXPECT_EQ(shared(Segment{0x7d000, 0x9d000}, 0x164c9, 0x7d000), "none");
}

}  // namespace
}  // namespace ferry::shared_text
