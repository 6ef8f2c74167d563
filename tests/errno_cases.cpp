// Calls every interposed function with bad input (bad fd, non-socket fd, NULL buffers,
// invalid flags) and a few good ones, printing "case: ret=R errno=E" per call, where E
// is "kept" when a successful call left errno as it was. Run once plainly and once
// under libferry.so: the outputs must match line for line. The first line says how
// many of the functions resolved into libferry.so.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
ssize_t __read_chk(int, void*, size_t, size_t);
ssize_t __recv_chk(int, void*, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void*, size_t, size_t, int, sockaddr*, socklen_t*);
int __poll_chk(pollfd*, nfds_t, int, size_t);
int __ppoll_chk(pollfd*, nfds_t, const timespec*, const sigset_t*, size_t);
int close_range(unsigned, unsigned, int);
int epoll_pwait2(int, epoll_event*, int, const timespec*, const sigset_t*);
}

namespace {

constexpr int kSentinel = 4242;

void report(const char* label, long r, int e) {
  if (r >= 0 && e == kSentinel) {
    printf("%s: ret=%ld errno=kept\n", label, r);
  } else {
    printf("%s: ret=%ld errno=%s\n", label, r, r < 0 ? strerrorname_np(e) : "changed");
  }
}

#define CASE(label, expr)            \
  do {                               \
    errno = kSentinel;               \
    long r_ = static_cast<long>(expr); \
    report(label, r_, errno);        \
  } while (0)

const char* kFunctions[] = {
    "socket", "bind", "listen", "accept", "accept4", "connect", "shutdown", "close", "read", "readv", "recv",
    "recvfrom", "recvmsg", "recvmmsg", "write", "writev", "send", "sendto", "sendmsg", "sendmmsg", "sendfile",
    "sendfile64", "getsockopt", "setsockopt", "getsockname", "getpeername", "fcntl", "fcntl64", "ioctl", "dup",
    "dup2", "dup3", "close_range", "poll", "ppoll", "select", "pselect", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "fork", "vfork", "__read_chk", "__recv_chk",
    "__recvfrom_chk", "__poll_chk", "__ppoll_chk"};

void report_interposition() {
  int total = 0, ours = 0;
  for (const char* name : kFunctions) {
    ++total;
    Dl_info info{};
    void* sym = dlsym(RTLD_DEFAULT, name);
    if (sym && dladdr(sym, &info) && info.dli_fname && strstr(info.dli_fname, "libferry")) {
      ++ours;
    } else if (getenv("LD_PRELOAD")) {
      fprintf(stderr, "not interposed: %s\n", name);
    }
  }
  printf("interposed %d of %d\n", ours, total);
}

}  // namespace

int main() {
  signal(SIGPIPE, SIG_IGN);
  report_interposition();
  const int bad = 9999;
  int pipefd[2];
  pipe(pipefd);
  int file = open("/dev/null", O_RDWR);
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  int ep = epoll_create1(0);
  char buf[64];
  sockaddr_in lo{};
  lo.sin_family = AF_INET;
  lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  lo.sin_port = htons(1);  // nothing listens on port 1
  socklen_t len = sizeof lo;
  iovec iov{buf, sizeof buf};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  mmsghdr mm{};
  mm.msg_hdr = msg;
  pollfd pfd{bad, POLLIN, 0};
  fd_set set;
  timeval tv{0, 0};
  timespec ts{0, 0};
  epoll_event ev{};
  ev.events = EPOLLIN;

  CASE("socket bad family", socket(-1, SOCK_STREAM, 0));
  CASE("socket bad type", socket(AF_INET, 999, 0));
  CASE("socket bad protocol", socket(AF_INET, SOCK_STREAM, 999));
  CASE("socket bad flags", socket(AF_INET, SOCK_STREAM | 0x40000000, 0));
  CASE("bind bad fd", bind(bad, (sockaddr*)&lo, len));
  CASE("bind non-socket", bind(file, (sockaddr*)&lo, len));
  CASE("bind NULL addr", bind(sock, nullptr, len));
  CASE("bind short addr", bind(sock, (sockaddr*)&lo, 1));
  CASE("listen bad fd", listen(bad, 1));
  CASE("listen non-socket", listen(pipefd[0], 1));
  CASE("accept bad fd", accept(bad, nullptr, nullptr));
  CASE("accept non-socket", accept(file, nullptr, nullptr));
  CASE("accept not listening", accept(sock, nullptr, nullptr));
  CASE("accept4 bad flags", accept4(sock, nullptr, nullptr, 0x1234));
  CASE("connect bad fd", connect(bad, (sockaddr*)&lo, len));
  CASE("connect non-socket", connect(file, (sockaddr*)&lo, len));
  CASE("connect NULL addr", connect(sock, nullptr, len));
  CASE("connect short addr", connect(sock, (sockaddr*)&lo, 2));
  CASE("connect refused", connect(sock, (sockaddr*)&lo, len));
  CASE("shutdown bad fd", shutdown(bad, SHUT_RDWR));
  CASE("shutdown non-socket", shutdown(file, SHUT_RDWR));
  CASE("shutdown bad how", shutdown(sock, 99));
  CASE("shutdown not connected", shutdown(sock, SHUT_RDWR));
  CASE("read bad fd", read(bad, buf, sizeof buf));
  CASE("read write-end", read(pipefd[1], buf, sizeof buf));
  CASE("read unconnected socket", read(sock, buf, sizeof buf));
  CASE("read zero", read(file, buf, 0));
  CASE("read /dev/null", read(file, buf, sizeof buf));
  CASE("readv bad fd", readv(bad, &iov, 1));
  CASE("readv bad count", readv(file, &iov, -1));
  CASE("readv NULL iov", readv(file, nullptr, 1));
  CASE("recv bad fd", recv(bad, buf, sizeof buf, 0));
  CASE("recv non-socket", recv(file, buf, sizeof buf, 0));
  CASE("recv unconnected", recv(sock, buf, sizeof buf, 0));
  CASE("recv OOB unconnected", recv(sock, buf, sizeof buf, MSG_OOB));
  CASE("recvfrom bad fd", recvfrom(bad, buf, sizeof buf, 0, nullptr, nullptr));
  CASE("recvfrom non-socket", recvfrom(pipefd[0], buf, sizeof buf, 0, nullptr, nullptr));
  CASE("recvmsg bad fd", recvmsg(bad, &msg, 0));
  CASE("recvmsg non-socket", recvmsg(file, &msg, 0));
  CASE("recvmsg NULL msg", recvmsg(sock, nullptr, 0));
  CASE("recvmmsg bad fd", recvmmsg(bad, &mm, 1, 0, nullptr));
  CASE("recvmmsg non-socket", recvmmsg(file, &mm, 1, 0, nullptr));
  CASE("write bad fd", write(bad, buf, sizeof buf));
  CASE("write read-end", write(pipefd[0], buf, sizeof buf));
  CASE("write unconnected socket", write(sock, buf, sizeof buf));
  CASE("write NULL buffer", write(pipefd[1], nullptr, 10));
  CASE("write /dev/null", write(file, buf, sizeof buf));
  CASE("writev bad count", writev(file, &iov, -1));
  CASE("writev NULL iov", writev(file, nullptr, 1));
  CASE("send bad fd", send(bad, buf, 1, 0));
  CASE("send non-socket", send(file, buf, 1, 0));
  CASE("send unconnected", send(sock, buf, 1, MSG_NOSIGNAL));
  CASE("sendto bad fd", sendto(bad, buf, 1, 0, (sockaddr*)&lo, len));
  CASE("sendto non-socket", sendto(file, buf, 1, 0, (sockaddr*)&lo, len));
  CASE("sendmsg bad fd", sendmsg(bad, &msg, 0));
  CASE("sendmsg NULL msg", sendmsg(sock, nullptr, 0));
  CASE("sendmmsg bad fd", sendmmsg(bad, &mm, 1, 0));
  CASE("sendmmsg non-socket", sendmmsg(file, &mm, 1, 0));
  CASE("sendfile bad out", sendfile(bad, file, nullptr, 10));
  CASE("sendfile bad in", sendfile(sock, bad, nullptr, 10));
  CASE("sendfile64 bad out", sendfile64(bad, file, nullptr, 10));
  CASE("getsockopt bad fd", getsockopt(bad, SOL_SOCKET, SO_TYPE, buf, &len));
  CASE("getsockopt non-socket", getsockopt(file, SOL_SOCKET, SO_TYPE, buf, &len));
  CASE("getsockopt bad option", getsockopt(sock, SOL_SOCKET, 9999, buf, &len));
  CASE("getsockopt NULL len", getsockopt(sock, SOL_SOCKET, SO_TYPE, buf, nullptr));
  CASE("setsockopt bad fd", setsockopt(bad, SOL_SOCKET, SO_REUSEADDR, buf, 4));
  CASE("setsockopt non-socket", setsockopt(file, SOL_SOCKET, SO_REUSEADDR, buf, 4));
  CASE("setsockopt bad level", setsockopt(sock, 9999, 1, buf, 4));
  CASE("setsockopt NULL value", setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, nullptr, 4));
  CASE("setsockopt short value", setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, buf, 1));
  CASE("getsockname bad fd", getsockname(bad, (sockaddr*)&lo, &len));
  CASE("getsockname non-socket", getsockname(file, (sockaddr*)&lo, &len));
  CASE("getpeername unconnected", getpeername(sock, (sockaddr*)&lo, &len));
  CASE("getpeername NULL", getpeername(sock, nullptr, nullptr));
  CASE("fcntl bad fd", fcntl(bad, F_GETFL));
  CASE("fcntl bad cmd", fcntl(file, 99999));
  CASE("fcntl getfl", fcntl(sock, F_GETFL));
  CASE("fcntl dupfd negative", fcntl(sock, F_DUPFD, -1));
  CASE("fcntl64 bad fd", fcntl64(bad, F_GETFD));
  CASE("ioctl bad fd", ioctl(bad, FIONREAD, buf));
  CASE("ioctl non-tty request", ioctl(pipefd[0], 0x1234, buf));
  CASE("ioctl FIONREAD NULL", ioctl(pipefd[0], FIONREAD, nullptr));
  CASE("dup bad fd", dup(bad));
  CASE("dup2 bad fd", dup2(bad, 50));
  CASE("dup2 negative target", dup2(file, -1));
  CASE("dup3 same fd", dup3(file, file, 0));
  CASE("dup3 bad flags", dup3(file, 50, 0x1234));
  CASE("close_range reversed", close_range(10, 5, 0));
  CASE("close_range bad flags", close_range(900, 901, 0x1234));
  CASE("close_range empty", close_range(900, 901, 0));
  CASE("close bad fd", close(bad));
  CASE("close negative", close(-1));
  CASE("poll NULL", poll(nullptr, 1, 0));
  CASE("poll bad fd", poll(&pfd, 1, 0));
  printf("  revents=%d\n", pfd.revents);
  CASE("ppoll bad timeout", ppoll(&pfd, 1, &(const timespec&)timespec{0, -1}, nullptr));
  FD_ZERO(&set);
  const int closed_small = 900;  // select() only takes fds below FD_SETSIZE
  // The kernel ignores select() bits past the end of its descriptor table, which grows
  // with the highest number ever opened (ferry keeps its own descriptors near 1000):
  // grow it in both runs, so that the closed descriptor is judged alike.
  close(fcntl(0, F_DUPFD, 1100));
  FD_SET(closed_small, &set);
  CASE("select negative", select(-1, nullptr, nullptr, nullptr, &tv));
  CASE("select bad fd", select(closed_small + 1, &set, nullptr, nullptr, &tv));
  CASE("pselect bad timeout", pselect(1, nullptr, nullptr, nullptr, &(const timespec&)timespec{-1, 0}, nullptr));
  CASE("epoll_create zero", epoll_create(0));
  CASE("epoll_create1 bad flags", epoll_create1(0x1234));
  CASE("epoll_ctl bad epfd", epoll_ctl(bad, EPOLL_CTL_ADD, sock, &ev));
  CASE("epoll_ctl not epoll", epoll_ctl(file, EPOLL_CTL_ADD, sock, &ev));
  CASE("epoll_ctl self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
  CASE("epoll_ctl regular file", epoll_ctl(ep, EPOLL_CTL_ADD, file, &ev));
  CASE("epoll_ctl bad op", epoll_ctl(ep, 99, sock, &ev));
  CASE("epoll_ctl del absent", epoll_ctl(ep, EPOLL_CTL_DEL, sock, &ev));
  CASE("epoll_ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, sock, &ev));
  CASE("epoll_ctl add twice", epoll_ctl(ep, EPOLL_CTL_ADD, sock, &ev));
  CASE("epoll_wait bad fd", epoll_wait(bad, &ev, 1, 0));
  CASE("epoll_wait zero max", epoll_wait(ep, &ev, 0, 0));
  CASE("epoll_wait NULL events", epoll_wait(ep, nullptr, 1, 0));
  CASE("epoll_pwait bad fd", epoll_pwait(bad, &ev, 1, 0, nullptr));
  CASE("epoll_pwait2 bad fd", epoll_pwait2(bad, &ev, 1, &ts, nullptr));
  CASE("epoll_pwait2 timeout", epoll_pwait2(ep, &ev, 1, &ts, nullptr));
  CASE("__read_chk bad fd", __read_chk(bad, buf, sizeof buf, sizeof buf));
  CASE("__recv_chk non-socket", __recv_chk(file, buf, sizeof buf, sizeof buf, 0));
  CASE("__recvfrom_chk bad fd", __recvfrom_chk(bad, buf, sizeof buf, sizeof buf, 0, nullptr, nullptr));
  CASE("__poll_chk bad fd", __poll_chk(&pfd, 1, 0, sizeof pfd));
  CASE("__ppoll_chk bad fd", __ppoll_chk(&pfd, 1, &ts, nullptr, sizeof pfd));
  {
    errno = kSentinel;
    pid_t pid = fork();
    if (pid == 0) _exit(7);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("fork: child exit %d errno=%s\n", WEXITSTATUS(status), errno == kSentinel ? "kept" : "changed");
    pid = vfork();
    if (pid == 0) _exit(8);
    waitpid(pid, &status, 0);
    printf("vfork: child exit %d\n", WEXITSTATUS(status));
  }
  return 0;
}
