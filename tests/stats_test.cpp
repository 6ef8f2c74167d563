#include "core/base/stats.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ferry::stats {
namespace {

// Found as a debugger finds a variable: through the section headers of the object
// that holds them (here the test program itself).
TEST(Stats, CountersAreReadableFromOutside) {
  add(g.bytes_tcp_sent, 5);
  uint64_t before = g.bytes_tcp_sent.load();
  add(g.bytes_tcp_sent, 1000);
  static Counters seen;
  ASSERT_EQ(read_process(getpid(), seen), "");
  EXPECT_EQ(seen.bytes_tcp_sent.load(), before + 1000);
  EXPECT_EQ(seen.pid, static_cast<uint64_t>(getpid()));
  EXPECT_NE(format(seen).find("bytes_tcp_sent"), std::string::npos);
}

TEST(Stats, AllZeroIsTrueOnlyWhenNothingWasCounted) {
  static Counters c;
  EXPECT_TRUE(all_zero(c));
  c.pid = 42;  // not a counter
  EXPECT_TRUE(all_zero(c));
  add(c.bytes_rdma_received, 1);  // the last of the list
  EXPECT_FALSE(all_zero(c));
  c.bytes_rdma_received.store(0);
  add(c.tcp_sockets, 1);  // the first
  EXPECT_FALSE(all_zero(c));
}

TEST(Stats, ForkedChildGetsItsOwnZeroedPage) {
  add(g.connections_passive, 3);
  uint64_t parent = g.connections_passive.load();
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t pid = fork();
  if (pid == 0) {
    after_fork_child();
    bool zero = g.connections_passive.load() == 0;
    add(g.connections_passive, 100);
    char c = zero ? 'z' : 'n';
    if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1) _exit(2);
    _exit(zero ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  static Counters child;  // what another process reads of the child: its own counts
  EXPECT_EQ(read_process(pid, child), "");
  EXPECT_EQ(child.connections_passive.load(), 100u);
  EXPECT_EQ(child.pid, static_cast<uint64_t>(pid));
  ASSERT_EQ(write(done[1], &c, 1), 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(g.connections_passive.load(), parent);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

TEST(Stats, NonFerryProcessIsReportedAsSuch) {
  static Counters seen;
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sleep", "sleep", "5", nullptr);
    _exit(127);
  }
  usleep(200000);
  std::string why = read_process(pid, seen);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_NE(why.find("does not run ferry"), std::string::npos) << why;
  EXPECT_NE(read_process(999999999, seen), "");
}

}  // namespace
}  // namespace ferry::stats
