// What keeps a whole process's connections on TCP (core/base/tcp_only.h): each reason
// holds from the first time it is noted; a forked child keeps the io_uring it shares
// and leaves behind the credentials its own RDMA objects will be opened with.
#include "core/base/tcp_only.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ferry {
namespace {

TEST(TcpOnly, EachReasonHoldsFromItsFirstNoteAndAForkedChildDropsCredentials) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // in a child of its own: the process's flags stay clean for the other tests
    int bad = 0;
    bad |= tcp_only::why() != 0;
    bad |= !tcp_only::enter(tcp_only::credentials) << 1;
    bad |= tcp_only::enter(tcp_only::credentials) << 2;
    bad |= !tcp_only::enter(tcp_only::io_uring) << 3;
    bad |= (tcp_only::why() != (tcp_only::io_uring | tcp_only::credentials)) << 4;
    tcp_only::after_fork_child();
    bad |= (tcp_only::why() != tcp_only::io_uring) << 5;
    bad |= !tcp_only::enter(tcp_only::credentials) << 6;
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks, as bits: " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace ferry
