#include "core/api/fdprobe.h"

#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace ferry {

SocketRef probe_fd(int fd) noexcept {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return nullptr;
  int domain = 0, type = 0, protocol = 0, listening = 0;
  socklen_t len = sizeof(int);
  if (real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return nullptr;
  if (domain != AF_INET && domain != AF_INET6) return nullptr;
  len = sizeof(int);
  if (real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return nullptr;
  len = sizeof(int);
  if (real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) return nullptr;
  len = sizeof(int);
  real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);

  Role role = Role::fresh;
  if (listening) {
    role = Role::listener;
  } else {
    sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    // Whether it was accepted or connected is not recoverable; both are connections.
    if (real.getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) role = Role::active;
  }
  auto s = make_socket(domain, role);
  int fl = real.fcntl(fd, F_GETFL);
  s->nonblocking.store(fl >= 0 && (fl & O_NONBLOCK));
  int nodelay = 0;
  len = sizeof nodelay;
  if (real.getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) == 0) s->nodelay.store(nodelay != 0);
  timeval tv{};
  len = sizeof tv;
  if (real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0) s->rcvtimeo_us.store(tv.tv_sec * 1000000LL + tv.tv_usec);
  len = sizeof tv;
  if (real.getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) == 0) s->sndtimeo_us.store(tv.tv_sec * 1000000LL + tv.tv_usec);
  linger lg{};
  len = sizeof lg;
  if (real.getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0) s->linger_s.store(lg.l_onoff ? lg.l_linger : -1);
  int lowat = 1;
  len = sizeof lowat;
  if (real.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len) == 0) s->rcvlowat.store(std::max(lowat, 1));
  return s;
}

void adopt_fds(const int* fds, int n) noexcept {
  for (int i = 0; i < n; ++i) {
    if (SocketRef s = probe_fd(fds[i])) {
      FERRY_LOG(debug, "fdtable", "fd %d: adopted %s TCP socket (%s)", fds[i],
                s->family() == AF_INET ? "IPv4" : "IPv6", to_string(s->role()));
      if (s->role() == Role::active || s->role() == Role::passive)
        s->report = conn_report::take(fds[i], s->role() == Role::active ? conn_report::kClient : conn_report::kServer,
                                      conn_report::kInherited);
      fd_table().set(fds[i], std::move(s));
      stats::add(stats::g.tcp_sockets, 1);
    }
  }
}

void adopt_open_fds() noexcept {
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    FERRY_LOG(warn, "fdtable", "cannot read /proc/self/fd (%s): inherited sockets stay untracked", strerror(errno));
    return;
  }
  alignas(8) char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<dirent64*>(buf + off);
      off += d->d_reclen;
      char* end = nullptr;
      long fd = strtol(d->d_name, &end, 10);
      if (end == d->d_name || *end || fd == dir) continue;
      int f = static_cast<int>(fd);
      adopt_fds(&f, 1);
    }
  }
  real.close(dir);
}

}  // namespace ferry
