// Every receive call funnels into rx(), every send call into tx(): one place decides
// which transport carries the bytes of a socket.
#include "core/api.h"

#include "core/config.h"
#include "core/fdprobe.h"
#include "core/fdtable.h"
#include "core/stats.h"

#include <sys/sendfile.h>

namespace ferry::api {
namespace {

inline long rx(int fd, long r) noexcept {
  if (r > 0 && fd_table().tracked(fd)) stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
  return r;
}

inline long tx(int fd, long r) noexcept {
  if (r > 0 && fd_table().tracked(fd)) stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
  return r;
}

// Descriptors passed over a Unix socket may be TCP sockets ferry has to know about.
void adopt_passed_fds(const msghdr* msg) noexcept {
  if (!msg || !msg->msg_control || msg->msg_controllen == 0 || !config().enable) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    adopt_fds(reinterpret_cast<const int*>(CMSG_DATA(c)), n);
  }
}

}  // namespace

long read(int fd, void* buf, size_t n) noexcept { return rx(fd, sys(real.read(fd, buf, n))); }
long readv(int fd, const iovec* iov, int iovcnt) noexcept { return rx(fd, sys(real.readv(fd, iov, iovcnt))); }
long recv(int fd, void* buf, size_t n, int flags) noexcept { return rx(fd, sys(real.recv(fd, buf, n, flags))); }

long recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* fromlen) noexcept {
  return rx(fd, sys(real.recvfrom(fd, buf, n, flags, from, fromlen)));
}

long recvmsg(int fd, msghdr* msg, int flags) noexcept {
  long r = sys(real.recvmsg(fd, msg, flags));
  if (r >= 0) adopt_passed_fds(msg);
  return rx(fd, r);
}

long recvmmsg(int fd, mmsghdr* vec, unsigned n, int flags, timespec* timeout) noexcept {
  long r = sys(real.recvmmsg(fd, vec, n, flags, timeout));
  for (long i = 0; i < r; ++i) {
    adopt_passed_fds(&vec[i].msg_hdr);
    rx(fd, vec[i].msg_len);
  }
  return r;
}

long write(int fd, const void* buf, size_t n) noexcept { return tx(fd, sys(real.write(fd, buf, n))); }
long writev(int fd, const iovec* iov, int iovcnt) noexcept { return tx(fd, sys(real.writev(fd, iov, iovcnt))); }
long send(int fd, const void* buf, size_t n, int flags) noexcept { return tx(fd, sys(real.send(fd, buf, n, flags))); }

long sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t tolen) noexcept {
  return tx(fd, sys(real.sendto(fd, buf, n, flags, to, tolen)));
}

long sendmsg(int fd, const msghdr* msg, int flags) noexcept { return tx(fd, sys(real.sendmsg(fd, msg, flags))); }

long sendmmsg(int fd, mmsghdr* vec, unsigned n, int flags) noexcept {
  long r = sys(real.sendmmsg(fd, vec, n, flags));
  for (long i = 0; i < r; ++i) tx(fd, vec[i].msg_len);
  return r;
}

long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  return tx(out_fd, sys(real.sendfile(out_fd, in_fd, offset, count)));
}

}  // namespace ferry::api
