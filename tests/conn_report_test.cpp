#include "core/base/conn_report.h"

#include "core/base/stats.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <vector>

namespace ferry::conn_report {
namespace {

uint64_t inode_of(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

struct Pair {
  int fd[2];
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~Pair() {
    close(fd[0]);
    close(fd[1]);
  }
};

// The launcher finds the table through the counters, and reads what the process wrote.
TEST(ConnReport, AnEntryIsFoundThroughTheCountersWithWhatWasNoted) {
  Pair p;
  Entry* e = take(p.fd[0], kServer);
  ASSERT_NE(e, nullptr);
  state(e, kLinked + 1);
  why(e, stats::g.tcp_rule);
  sent(e, 100);
  sent(e, 23);
  received(e, 7);
  registered(e, 4096, 17);
  static stats::Counters seen;
  ASSERT_EQ(stats::read_process(getpid(), seen), "");
  ASSERT_NE(seen.report.load(), 0u);
  const auto* table = reinterpret_cast<const Entry*>(seen.report.load());
  bool found = false;
  for (uint32_t i = 0; i < kCapacity && !found; ++i) {
    if (table[i].inode.load() != inode_of(p.fd[0])) continue;
    found = true;
    EXPECT_EQ(&table[i], e);
    EXPECT_EQ(table[i].role.load(), kServer);
    EXPECT_EQ(table[i].state.load(), kLinked + 1);
    EXPECT_STREQ(stats::name_at(table[i].why.load() - 1), "tcp_rule");
    EXPECT_EQ(table[i].rdma_sent.load(), 123u);
    EXPECT_EQ(table[i].rdma_received.load(), 7u);
    EXPECT_EQ(table[i].registered.load(), 4096u);
    EXPECT_EQ(table[i].qp.load(), 17u);
  }
  EXPECT_TRUE(found);
  give_back(e);
  EXPECT_EQ(e->inode.load(), 0u);
}

TEST(ConnReport, AGivenBackEntryIsTakenAgainAndStartsAfresh) {
  Pair p;
  Entry* a = take(p.fd[0], kClient);
  ASSERT_NE(a, nullptr);
  sent(a, 5);
  why(a, kWhyLoopback);
  give_back(a);
  Entry* b = take(p.fd[1], kServer, kInherited);
  EXPECT_EQ(b, a);  // the last given back is the first taken
  EXPECT_EQ(b->inode.load(), inode_of(p.fd[1]));
  EXPECT_EQ(b->rdma_sent.load(), 0u);
  EXPECT_EQ(b->why.load(), 0u);
  EXPECT_EQ(b->flags.load(), kInherited);
  give_back(b);
}

TEST(ConnReport, AFullTableTakesNoMoreAndNothingIsHandedOutTwice) {
  Pair p;
  std::vector<Entry*> taken;
  std::set<Entry*> seen;
  while (Entry* e = take(p.fd[0], kClient)) {
    EXPECT_TRUE(seen.insert(e).second);
    taken.push_back(e);
    ASSERT_LE(taken.size(), kCapacity);
  }
  EXPECT_GE(taken.size(), kCapacity - 8);  // the other tests' entries are back
  give_back(taken.back());
  Entry* again = take(p.fd[0], kClient);
  EXPECT_EQ(again, taken.back());
  for (Entry* e : taken) give_back(e);
}

TEST(ConnReport, NoEntryForADescriptorThatIsNotOpen) {
  EXPECT_EQ(take(-1, kClient), nullptr);
}

TEST(ConnReport, CountersAreNamedByTheirPlace) {
  EXPECT_EQ(stats::index_of(stats::g.tcp_sockets), 0);
  EXPECT_STREQ(stats::name_at(stats::index_of(stats::g.downgrades_handoff)), "downgrades_handoff");
  EXPECT_EQ(stats::name_at(-1), nullptr);
  EXPECT_EQ(stats::name_at(stats::index_of(stats::g.bytes_rdma_received) + 1), nullptr);
  static std::atomic<uint64_t> other;
  EXPECT_EQ(stats::index_of(other), -1);
}

}  // namespace
}  // namespace ferry::conn_report
