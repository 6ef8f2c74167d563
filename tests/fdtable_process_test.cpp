// The process's fd table following real descriptors through core's socket calls:
// creation, dup family, fcntl, close, close_range, fork, exec and SCM_RIGHTS.
#include "core/api/api.h"
#include "core/conn/fdtable.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace ferry {
namespace {

int tcp_socket(int flags = 0) { return static_cast<int>(api::socket(AF_INET, SOCK_STREAM | flags, 0)); }

// A listening socket on 127.0.0.1 and a client connected to it, both through api::.
struct Pair {
  int listener = -1, client = -1, server = -1;
  Pair() {
    listener = tcp_socket();
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(api::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(api::listen(listener, 4), 0);
    socklen_t len = sizeof a;
    api::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    client = tcp_socket();
    EXPECT_EQ(api::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    server = static_cast<int>(api::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK));
  }
  ~Pair() {
    for (int fd : {listener, client, server})
      if (fd >= 0) api::close(fd);
  }
};

TEST(FdTableProcess, TracksOnlyTcpSockets) {
  int tcp = tcp_socket();
  int tcp6 = static_cast<int>(api::socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP));
  int udp = static_cast<int>(api::socket(AF_INET, SOCK_DGRAM, 0));
  int unix_sock = static_cast<int>(api::socket(AF_UNIX, SOCK_STREAM, 0));
  int sctp_like = static_cast<int>(api::socket(AF_INET, SOCK_STREAM, 262));  // MPTCP, if present
  EXPECT_TRUE(fd_table().tracked(tcp));
  EXPECT_TRUE(fd_table().tracked(tcp6));
  EXPECT_FALSE(fd_table().tracked(udp));
  EXPECT_FALSE(fd_table().tracked(unix_sock));
  if (sctp_like >= 0) {
    EXPECT_FALSE(fd_table().tracked(sctp_like));
  }
  for (int fd : {tcp, tcp6, udp, unix_sock, sctp_like})
    if (fd >= 0) api::close(fd);
  EXPECT_FALSE(fd_table().tracked(tcp));
}

TEST(FdTableProcess, RolesFollowListenConnectAccept) {
  Pair p;
  EXPECT_EQ(fd_table().get(p.listener)->role(), Role::listener);
  EXPECT_EQ(fd_table().get(p.client)->role(), Role::active);
  ASSERT_GE(p.server, 0);
  EXPECT_EQ(fd_table().get(p.server)->role(), Role::passive);
  EXPECT_TRUE(fd_table().get(p.server)->nonblocking.load());
  EXPECT_FALSE(fd_table().get(p.client)->nonblocking.load());
}

TEST(FdTableProcess, DupSharesTheSocketAndCloseKeepsTheOther) {
  int fd = tcp_socket();
  int d = static_cast<int>(api::dup(fd));
  ASSERT_GE(d, 0);
  EXPECT_EQ(fd_table().get(fd), fd_table().get(d));
  api::close(fd);
  EXPECT_FALSE(fd_table().tracked(fd));
  ASSERT_TRUE(fd_table().tracked(d));
  api::close(d);
  EXPECT_FALSE(fd_table().tracked(d));
}

TEST(FdTableProcess, Dup2AndDup3ReplaceTheTarget) {
  int sock = tcp_socket();
  int other = tcp_socket();
  int file = ::open("/dev/null", O_RDONLY);
  SocketRef s = fd_table().get(sock);
  EXPECT_EQ(api::dup2(sock, other), other);  // a socket over a socket
  EXPECT_EQ(fd_table().get(other), s);
  EXPECT_EQ(api::dup2(file, other), other);  // a file over a socket: untracked now
  EXPECT_FALSE(fd_table().tracked(other));
  EXPECT_EQ(api::dup3(sock, other, O_CLOEXEC), other);
  EXPECT_EQ(fd_table().get(other), s);
  EXPECT_EQ(api::dup2(sock, sock), sock);  // same fd: no change
  EXPECT_EQ(fd_table().get(sock), s);
  EXPECT_EQ(api::dup3(sock, sock, 0), -EINVAL);
  EXPECT_EQ(api::dup2(12345, other), -EBADF);  // failure leaves the target alone
  EXPECT_EQ(fd_table().get(other), s);
  for (int fd : {sock, other, file}) api::close(fd);
}

TEST(FdTableProcess, FcntlDupAndFlags) {
  int sock = tcp_socket();
  int d = static_cast<int>(api::fcntl(sock, F_DUPFD_CLOEXEC, reinterpret_cast<void*>(200)));
  ASSERT_GE(d, 200);
  EXPECT_EQ(fd_table().get(d), fd_table().get(sock));
  EXPECT_EQ(api::fcntl(sock, F_SETFL, reinterpret_cast<void*>(O_NONBLOCK | O_RDWR)), 0);
  EXPECT_TRUE(fd_table().get(d)->nonblocking.load());  // O_NONBLOCK belongs to the shared description
  int off = 0;
  EXPECT_EQ(api::ioctl(sock, FIONBIO, &off), 0);
  EXPECT_FALSE(fd_table().get(sock)->nonblocking.load());
  api::close(sock);
  api::close(d);
}

TEST(FdTableProcess, SocketOptionsMirrorTheKernel) {
  int sock = tcp_socket();
  int one = 1;
  EXPECT_EQ(api::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  timeval tv{1, 500000};
  EXPECT_EQ(api::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  linger lg{1, 3};
  EXPECT_EQ(api::setsockopt(sock, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  timeval bad{0, 2000000};  // rejected by the kernel: nothing recorded
  EXPECT_EQ(api::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &bad, sizeof bad), -EDOM);
  SocketRef s = fd_table().get(sock);
  EXPECT_TRUE(s->nodelay.load());
  EXPECT_EQ(s->rcvtimeo_us.load(), 1'500'000);
  EXPECT_EQ(s->sndtimeo_us.load(), 0);
  EXPECT_EQ(s->linger_s.load(), 3);
  api::close(sock);
}

TEST(FdTableProcess, CloseRangeUntracksAndCloexecDoesNot) {
  int a = static_cast<int>(api::fcntl(tcp_socket(), F_DUPFD, reinterpret_cast<void*>(300)));
  int b = static_cast<int>(api::fcntl(a, F_DUPFD, reinterpret_cast<void*>(310)));
  int c = static_cast<int>(api::fcntl(a, F_DUPFD, reinterpret_cast<void*>(5000)));
  EXPECT_EQ(api::close_range(300, 320, CLOSE_RANGE_CLOEXEC), 0);
  EXPECT_TRUE(fd_table().tracked(a));
  EXPECT_EQ(api::close_range(300, 320, 0), 0);
  EXPECT_FALSE(fd_table().tracked(a));
  EXPECT_FALSE(fd_table().tracked(b));
  EXPECT_TRUE(fd_table().tracked(c));
  EXPECT_EQ(api::close_range(4000, ~0u, 0), 0);
  EXPECT_FALSE(fd_table().tracked(c));
  EXPECT_EQ(api::close_range(10, 5, 0), -EINVAL);
}

TEST(FdTableProcess, CloseOfAnUnknownFdIsEbadf) {
  EXPECT_EQ(api::close(987654), -EBADF);
  EXPECT_EQ(api::close(-1), -EBADF);
}

TEST(FdTableProcess, ForkChildSeesTheSameSockets) {
  Pair p;
  pid_t pid = static_cast<pid_t>(api::fork());
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool ok = fd_table().tracked(p.client) && fd_table().get(p.listener)->role() == Role::listener;
    // The child's closes do not touch the parent's table.
    api::close(p.client);
    _exit(ok && !fd_table().tracked(p.client) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(fd_table().tracked(p.client));
  char c = 'x';
  EXPECT_EQ(api::send(p.client, &c, 1, 0), 1);  // still open in the parent
}

std::string run_fd_report(const std::vector<int>& keep) {
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    execl(FERRY_FD_REPORT, FERRY_FD_REPORT, nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  return text;
}

TEST(FdTableProcess, ExecKeepsInheritedSocketsAndDropsCloexecOnes) {
  Pair p;  // client and listener are inheritable; server was accepted without CLOEXEC too
  int cloexec = tcp_socket(SOCK_CLOEXEC);
  int udp = static_cast<int>(api::socket(AF_INET, SOCK_DGRAM, 0));
  api::fcntl(p.client, F_SETFL, reinterpret_cast<void*>(O_NONBLOCK));
  std::string report = run_fd_report({});
  auto line = [](int fd, const char* rest) { return "fd " + std::to_string(fd) + " " + rest + "\n"; };
  EXPECT_NE(report.find(line(p.listener, "listener blocking")), std::string::npos) << report;
  EXPECT_NE(report.find(line(p.client, "active nonblocking")), std::string::npos) << report;
  EXPECT_NE(report.find(line(p.server, "active nonblocking")), std::string::npos) << report;
  EXPECT_EQ(report.find("fd " + std::to_string(cloexec) + " "), std::string::npos) << report;
  EXPECT_EQ(report.find("fd " + std::to_string(udp) + " "), std::string::npos) << report;
  api::close(cloexec);
  api::close(udp);
}

// One byte with room for one descriptor of ancillary data.
struct OneFdMessage {
  char byte = 'x';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  OneFdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

TEST(FdTableProcess, SocketsReceivedOverScmRightsAreTracked) {
  Pair p;
  int unix_pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, unix_pair), 0);
  OneFdMessage out;
  cmsghdr* c = CMSG_FIRSTHDR(&out.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &p.client, sizeof(int));
  ASSERT_EQ(api::sendmsg(unix_pair[0], &out.msg, 0), 1);

  OneFdMessage in;
  ASSERT_EQ(api::recvmsg(unix_pair[1], &in.msg, 0), 1);
  int received;
  memcpy(&received, CMSG_DATA(CMSG_FIRSTHDR(&in.msg)), sizeof(int));
  ASSERT_NE(received, p.client);
  ASSERT_TRUE(fd_table().tracked(received));
  EXPECT_EQ(fd_table().get(received)->role(), Role::active);
  api::close(received);
  close(unix_pair[0]);
  close(unix_pair[1]);
}

}  // namespace
}  // namespace ferry
