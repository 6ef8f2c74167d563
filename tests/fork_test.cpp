// fork while other threads are inside calls: the child gets every lock fresh, and its
// calls on the inherited sockets return.
#include "core/api/api.h"
#include "core/api/epoll_set.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"
#include "core/conn/link.h"
#include "core/process/forking.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

namespace ferry {
namespace {

int tcp_pair(int& client, int& server) {
  int listener = static_cast<int>(api::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  api::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
  api::listen(listener, 4);
  socklen_t len = sizeof a;
  api::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  client = static_cast<int>(api::socket(AF_INET, SOCK_STREAM, 0));
  api::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a);
  server = static_cast<int>(api::accept(listener, nullptr, nullptr));
  return listener;
}

// A socket that went to RDMA in this process (as far as the child can tell: its link
// is cut over), with another thread inside a send and a receive on it, holding both of
// its locks, while the process forks.
TEST(Fork, ChildCallsReturnWhileAnotherThreadHoldsTheSocketsLocks) {
  forking::install();
  int client = -1, server = -1;
  int listener = tcp_pair(client, server);
  // The loopback connection stays on TCP for good; the socket ferry tracks for it is
  // replaced by one that can leave.
  SocketRef s = make_socket(AF_INET, Role::active);
  ASSERT_TRUE(fd_table().set(client, s));
  // Cut over in a process before this one (inherited): a link on RDMA holds a channel
  // otherwise, which a test without a fabric cannot build.
  s->link = std::make_shared<Link>();
  s->link->inherited = true;
  s->link->socket = s;
  ASSERT_TRUE(s->link->attach(*s));
  ASSERT_TRUE(s->link->transition(ConnState::handshake, ConnState::established));
  int ep = static_cast<int>(api::epoll_create1(0));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ASSERT_EQ(api::epoll_ctl(ep, EPOLL_CTL_ADD, client, &ev), 0);

  std::promise<void> held, done;
  std::thread holder([&] {
    std::lock_guard<Lock> rx(s->rx_mu);
    std::lock_guard<Lock> tx(s->tx_mu);
    held.set_value();
    done.get_future().wait();
  });
  held.get_future().wait();

  pid_t pid = static_cast<pid_t>(api::fork());
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(10);  // a call that never returns fails the test
    char c = 0;
    bool ok = api::recv(client, &c, 1, 0) == -ECONNRESET;
    ok = ok && api::send(client, "x", 1, MSG_NOSIGNAL) != 0;  // returns, whatever it says
    epoll_event out[4];
    ok = ok && api::epoll_wait(ep, out, 4, 0) >= 0;
    ok = ok && api::close(client) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  done.set_value();
  holder.join();
  s->link->inherited = true;  // it has no RDMA side to tear down
  s.reset();
  for (int fd : {ep, client, server, listener}) api::close(fd);
}

// Forks from several threads at once while others keep sending on a pair: no fork
// hangs, and every child's calls return.
TEST(Fork, ConcurrentForksAndCalls) {
  forking::install();
  int client = -1, server = -1;
  int listener = tcp_pair(client, server);
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    char buf[512] = {};
    while (!stop) {
      api::send(client, buf, sizeof buf, MSG_DONTWAIT | MSG_NOSIGNAL);
      api::recv(server, buf, sizeof buf, MSG_DONTWAIT);
    }
  });
  std::atomic<int> failures{0};
  auto forker = [&] {
    for (int i = 0; i < 20; ++i) {
      pid_t pid = static_cast<pid_t>(api::fork());
      if (pid == 0) {
        alarm(10);
        char c = 'y';
        _exit(api::send(client, &c, 1, MSG_NOSIGNAL) == 1 ? 0 : 1);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
  };
  std::thread a(forker), b(forker);
  a.join();
  b.join();
  stop = true;
  sender.join();
  EXPECT_EQ(failures.load(), 0);
  for (int fd : {client, server, listener}) api::close(fd);
}

// A forked child's close of a socket it inherited keeps the Socket (freeing it would
// copy the parent's pages for nothing); one the child made is let go as usual, and so
// is one closed in the process that made it.
TEST(Fork, ChildKeepsTheSocketsItInheritedAndClosed) {
  forking::install();
  int client = -1, server = -1;
  int listener = tcp_pair(client, server);
  pid_t pid = static_cast<pid_t>(api::fork());
  if (pid == 0) {
    alarm(10);
    std::weak_ptr<Socket> inherited = fd_table().get(listener);
    int fresh = static_cast<int>(api::socket(AF_INET, SOCK_STREAM, 0));
    std::weak_ptr<Socket> made = fd_table().get(fresh);
    bool ok = !inherited.expired() && !made.expired();
    api::close(listener);
    api::close(fresh);
    ok = ok && !inherited.expired() && made.expired() && !fd_table().tracked(listener);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::weak_ptr<Socket> mine = fd_table().get(server);
  api::close(server);
  EXPECT_TRUE(mine.expired());
  for (int fd : {client, listener}) api::close(fd);
}

}  // namespace
}  // namespace ferry

// What a forked child (and its parent, between forks) writes of ferry's own data is
// on one page: each page either writes first after a fork is a page fault and a copy.
extern "C" char __start_ferry_fork_data[], __stop_ferry_fork_data[];

namespace ferry {
namespace {

TEST(Fork, TheDataAForkWritesIsOnOnePage) {
  const auto first = reinterpret_cast<uintptr_t>(__start_ferry_fork_data);
  const auto last = reinterpret_cast<uintptr_t>(__stop_ferry_fork_data) - 1;
#if FERRY_CHECKS
  // Locks that record their holder make it larger: two pages at most (core/CMakeLists.txt).
  EXPECT_LE(last / 4096 - first / 4096, 1u) << (last - first + 1) << " bytes from " << std::hex << first;
#else
  EXPECT_EQ(first / 4096, last / 4096) << (last - first + 1) << " bytes from " << std::hex << first;
#endif
  const auto table = reinterpret_cast<uintptr_t>(&fd_table());
  const auto sets = reinterpret_cast<uintptr_t>(&epoll_sets());
  EXPECT_TRUE(table >= first && table <= last);
  EXPECT_TRUE(sets >= first && sets <= last);
  // The counters open the page (`ferry stat` reads them there), and the page is one of
  // its own.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(&stats::g), first);
  EXPECT_EQ(first % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(__stop_ferry_fork_data) % 4096, 0u);
}

}  // namespace
}  // namespace ferry
