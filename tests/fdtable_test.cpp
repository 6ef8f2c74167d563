// The table as a data structure: growth, replacement, ranges, concurrency.
#include "core/conn/fdtable.h"

#include "core/api/epoll_set.h"

#include <gtest/gtest.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

namespace ferry {
namespace {

SocketRef make() { return std::make_shared<Socket>(AF_INET, Role::fresh); }

TEST(FdTable, EmptyTableKnowsNothing) {
  FdTable t;
  EXPECT_EQ(t.get(0), nullptr);
  EXPECT_EQ(t.get(-1), nullptr);
  EXPECT_EQ(t.get(INT_MAX), nullptr);
  EXPECT_FALSE(t.tracked(5));
  EXPECT_EQ(t.size(), 0u);
}

TEST(FdTable, SetGetTake) {
  FdTable t;
  auto s = make();
  ASSERT_TRUE(t.set(7, s));
  EXPECT_EQ(t.get(7), s);
  EXPECT_TRUE(t.tracked(7));
  EXPECT_FALSE(t.tracked(8));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.take(7), s);
  EXPECT_EQ(t.get(7), nullptr);
  EXPECT_EQ(t.take(7), nullptr);
  EXPECT_EQ(t.size(), 0u);
}

TEST(FdTable, ReplaceKeepsCount) {
  FdTable t;
  auto a = make(), b = make();
  t.set(3, a);
  t.set(3, b);
  EXPECT_EQ(t.get(3), b);
  EXPECT_EQ(t.size(), 1u);
}

TEST(FdTable, MarkBelongsToOneBinding) {
  FdTable t;
  auto a = make(), b = make();
  ASSERT_TRUE(t.set(4, a));
  EXPECT_FALSE(t.marked(4));
  t.mark(4, b.get());  // not what 4 is bound to
  EXPECT_FALSE(t.marked(4));
  t.mark(4, a.get());
  EXPECT_TRUE(t.marked(4));
  EXPECT_FALSE(t.marked(5));
  ASSERT_TRUE(t.set(5, a));  // a dup: a binding of its own, unmarked until marked
  EXPECT_FALSE(t.marked(5));
  ASSERT_TRUE(t.set(4, b));  // rebinding drops the mark
  EXPECT_FALSE(t.marked(4));
  t.mark(5, a.get());
  t.take(5);
  EXPECT_FALSE(t.marked(5));
  ASSERT_TRUE(t.set(5, a));
  EXPECT_FALSE(t.marked(5));
}

TEST(FdTable, ReserveMakesTheLeafAndBindsNothing) {
  FdTable t;
  EXPECT_TRUE(t.reserve(0));
  EXPECT_TRUE(t.reserve(5000));
  for (int fd : {0, 7, 1023, 5000}) EXPECT_FALSE(t.tracked(fd)) << fd;
  EXPECT_EQ(t.size(), 0u);
  auto a = make();
  ASSERT_TRUE(t.set(7, a));
  EXPECT_EQ(t.get(7), a);
  EXPECT_EQ(t.size(), 1u);
}

// Nodes are fresh zero pages, never written when made: that is only right if zero bits
// are each node's empty state.
TEST(FdTable, ANodeIsZeroPages) {
  EXPECT_TRUE(FdTable::empty_nodes_are_zero_bits());
  EXPECT_TRUE(FdMap<EpollSet>::empty_nodes_are_zero_bits());
}

// The first nodes are pages of libferry's .bss, each handed out once and zero; past
// them, pages mapped on their own. Handing an arena node back leaves it where it is.
TEST(FdTable, NodesComeFromTheArenaFirstThenMappings) {
  constexpr size_t kNode = 7 * 4096;
  std::vector<unsigned char*> got;
  for (int i = 0; i < 64; ++i) {
    auto* p = static_cast<unsigned char*>(fdmap_detail::map_pages(kNode - 100));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    EXPECT_TRUE(std::all_of(p, p + kNode - 100, [](unsigned char c) { return c == 0; })) << i;
    for (auto* q : got) EXPECT_TRUE(p >= q + kNode - 100 || p + kNode - 100 <= q) << "overlap at " << i;
    got.push_back(p);
    if (!fdmap_detail::in_arena(p)) break;
  }
  EXPECT_FALSE(fdmap_detail::in_arena(got.back())) << "the arena never ran out";
  if (got.size() < 2) GTEST_SKIP() << "the tests before this one used the arena up";
  for (auto* p : got) {
    p[0] = 1;
    fdmap_detail::unmap_pages(p, kNode - 100);
  }
  for (auto* p : got)
    if (fdmap_detail::in_arena(p)) {
      EXPECT_EQ(p[0], 1);  // still ours: never unmapped
    }
}

TEST(FdTable, NoCeilingBelowIntMax) {
  FdTable t;
  for (int fd : {0, 1023, 1024, 1 << 20, (1 << 20) + 1, 5'000'000, INT_MAX - 1, INT_MAX}) {
    auto s = make();
    ASSERT_TRUE(t.set(fd, s)) << fd;
    EXPECT_EQ(t.get(fd), s) << fd;
  }
  EXPECT_FALSE(t.set(-1, make()));
  EXPECT_EQ(t.size(), 8u);
}

TEST(FdTable, SharedObjectOutlivesOneFd) {
  FdTable t;
  auto s = make();
  t.set(4, s);
  t.set(9, s);  // dup
  t.take(4);
  EXPECT_EQ(t.get(9), s);
  EXPECT_EQ(s.use_count(), 2);
}

TEST(FdTable, TakeRangeAcrossLeavesAndGaps) {
  FdTable t;
  constexpr int low = FdTable::kLow;
  std::vector<int> fds = {2, 3, low - 1, low, 1500, 2047, 2048, 3'000'000, INT_MAX};
  for (int fd : fds) t.set(fd, make());
  t.take_range(3, 2047);
  EXPECT_TRUE(t.tracked(2));
  EXPECT_FALSE(t.tracked(3));
  EXPECT_FALSE(t.tracked(low - 1));
  EXPECT_FALSE(t.tracked(low));
  EXPECT_FALSE(t.tracked(1500));
  EXPECT_FALSE(t.tracked(2047));
  EXPECT_TRUE(t.tracked(2048));
  t.take_range(2049, ~0u);  // close_range(x, ~0U) form
  EXPECT_TRUE(t.tracked(2048));
  EXPECT_FALSE(t.tracked(3'000'000));
  EXPECT_FALSE(t.tracked(INT_MAX));
  EXPECT_EQ(t.size(), 2u);
  t.take_range(0, 0);
  EXPECT_TRUE(t.tracked(2));
}

TEST(FdTable, ForEachInOrder) {
  FdTable t;
  for (int fd : {900, 5, 70000, 6}) t.set(fd, make());
  std::vector<int> seen;
  t.for_each([&](int fd, const SocketRef&) { seen.push_back(fd); });
  EXPECT_EQ(seen, (std::vector<int>{5, 6, 900, 70000}));
}

// The walk skips what was never bound, but never what is bound now: the edges of its
// 64-slot groups and leaves, the top of the range, numbers bound again after a take.
TEST(FdTable, ForEachSeesEveryEdge) {
  FdTable t;
  constexpr int low = FdTable::kLow;  // the last fd bound in the map itself, and the first in a leaf
  const std::vector<int> all{0,    low - 1, low,  63,   64,   127, 1023, 1024, 1087, 1088, 2047, (1 << 20) - 1, 1 << 20,
                             INT_MAX - 1, INT_MAX};
  for (int fd : all) t.set(fd, make());
  std::vector<int> seen;
  t.for_each([&](int fd, const SocketRef&) { seen.push_back(fd); });
  EXPECT_EQ(seen, all);
  for (int fd : all) t.take(fd);
  seen.clear();
  t.for_each([&](int fd, const SocketRef&) { seen.push_back(fd); });
  EXPECT_TRUE(seen.empty());
  t.set(64, make());
  t.set(low, make());
  t.set(3, make());
  t.for_each([&](int fd, const SocketRef&) { seen.push_back(fd); });
  EXPECT_EQ(seen, (std::vector<int>{3, low, 64}));
}

TEST(FdTable, ConcurrentReadersAndWriters) {
  FdTable t;
  std::atomic<bool> stop{false};
  std::atomic<long> hits{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (int fd = 0; fd < 4096; fd += 7) {
          if (SocketRef s = t.get(fd)) {
            EXPECT_EQ(s->family(), AF_INET);
            hits.fetch_add(1);
          }
        }
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    for (int fd = 0; fd < 4096; fd += 7) t.set(fd, make());
    for (int fd = 0; fd < 4096; fd += 14) t.take(fd);
  }
  // The last round's entries stay: give the readers time to find some (on a loaded
  // machine the writer can finish before a reader ever runs).
  for (int i = 0; i < 10000 && hits.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  for (auto& th : readers) th.join();
  EXPECT_GT(hits.load(), 0);
}

}  // namespace
}  // namespace ferry
