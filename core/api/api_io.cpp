// Every receive call funnels into rx(), every send call into tx(): one place decides
// which transport carries the bytes of a socket.
#include "core/api/api.h"

#include "core/api/fdprobe.h"
#include "core/api/passthrough.h"
#include "core/api/stream.h"
#include "core/base/config.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"
#include "core/conn/handoff.h"
#include "core/conn/link.h"
#include "core/conn/socket.h"
#include "core/conn/upgrade.h"

#include <climits>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry::api {
namespace {

// Counts what kernel TCP carried for a socket ferry tracks.
inline long rx(bool tracked, long r) noexcept { return received(tracked ? Path::counted : Path::kernel, r); }
inline long tx(int fd, bool tracked, long r) noexcept { return sent(fd, tracked ? Path::counted : Path::kernel, r); }

// Descriptors passed over a Unix socket may be TCP sockets ferry has to know about.
void adopt_passed_fds(const msghdr* msg) noexcept {
  if (!msg || !msg->msg_control || msg->msg_controllen == 0 || !config().enable) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
    adopt_fds(fds, n);
    for (int i = 0; i < n; ++i)
      if (SocketRef s = fd_table().get(fds[i])) upgrade::passed_in(fds[i], s);
  }
}

// The socket behind fd, borrowed for this call, when its bytes may travel over RDMA;
// otherwise nothing is held (the kernel's call ahead may block), only whether fd is a
// tracked socket.
struct Upgraded : FdTable::Borrowed {
  explicit Upgraded(int fd) noexcept {
    if (fd_table().marked(fd)) {  // on kernel TCP for good: nothing to borrow
      tracked = true;
      return;
    }
    fd_table().borrow(fd, *this);
    tracked = get() != nullptr;
    on_rdma = tracked && get()->transport() != Transport::kernel;
    // An inherited connection an ancestor upgraded: its owner hands it over first.
    if (on_rdma && get()->link->orphaned) on_rdma = handoff::carried(*get());
    if (!on_rdma) reset();
  }
  explicit operator bool() const { return on_rdma; }
  bool tracked = false;
  bool on_rdma = false;
};

// Path::look, out of line (the passthrough path stays a few instructions and one page
// of code): true when the socket's bytes may travel over RDMA, with on_rdma(socket)'s
// result in r; otherwise false, and p says whether the kernel's call is counted.
template <class F>
[[gnu::noinline]] bool rdma_call(int fd, Path& p, long& r, F&& on_rdma) noexcept {
  Upgraded s{fd};
  if (s) {
    r = on_rdma(*s);
    return true;
  }
  p = s.tracked ? Path::counted : Path::kernel;
  return false;
}

// A call on fd: on_rdma(socket) when the socket's bytes may travel over RDMA,
// otherwise kernel(path), libc's call.
template <class OnRdma, class Kernel>
[[gnu::always_inline]] inline long io_call(int fd, OnRdma&& on_rdma, Kernel&& kernel) noexcept {
  Path p = path_of(fd);
  long r;
  if (p == Path::look && rdma_call(fd, p, r, on_rdma)) return r;
  return kernel(p);
}

// One buffer through the stream.
long recv_one(int fd, Socket& s, void* buf, size_t n, int flags) noexcept {
  iovec v{buf, n};
  return stream::recv(fd, s, &v, 1, flags);
}
long send_one(int fd, Socket& s, const void* buf, size_t n, int flags) noexcept {
  iovec v{const_cast<void*>(buf), n};
  return stream::send(fd, s, &v, 1, flags);
}
long recv_iov(int fd, Socket& s, const iovec* iov, int iovcnt) noexcept {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
  return stream::recv(fd, s, iov, iovcnt, 0);
}
long send_iov(int fd, Socket& s, const iovec* iov, int iovcnt) noexcept {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
  return stream::send(fd, s, iov, iovcnt, 0);
}

long upgraded_recvmsg(int fd, Socket& s, msghdr* msg, int flags) noexcept {
  if (!msg) return -EFAULT;
  long r = stream::recv(fd, s, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
  if (r >= 0) {
    msg->msg_namelen = 0;
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
  }
  return r;
}

long upgraded_sendmsg(int fd, Socket& s, const msghdr* msg, int flags) noexcept {
  if (!msg) return -EFAULT;
  return stream::send(fd, s, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

}  // namespace

FERRY_IO_PATH long read(int fd, void* buf, size_t n) noexcept {
  return io_call(fd, [&](Socket& s) { return recv_one(fd, s, buf, n, 0); },
                 [&](Path p) { return received(p, sys(real.read(fd, buf, n))); });
}

FERRY_IO_PATH long readv(int fd, const iovec* iov, int iovcnt) noexcept {
  return io_call(fd, [&](Socket& s) { return recv_iov(fd, s, iov, iovcnt); },
                 [&](Path p) { return received(p, sys(real.readv(fd, iov, iovcnt))); });
}

FERRY_IO_PATH long recv(int fd, void* buf, size_t n, int flags) noexcept {
  return io_call(fd, [&](Socket& s) { return recv_one(fd, s, buf, n, flags); },
                 [&](Path p) { return received(p, sys(real.recv(fd, buf, n, flags))); });
}

FERRY_IO_PATH long recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* fromlen) noexcept {
  return io_call(
      fd,
      [&](Socket& s) {
        long k = recv_one(fd, s, buf, n, flags);
        if (k >= 0 && from && fromlen) *fromlen = 0;  // as the kernel does for TCP
        return k;
      },
      [&](Path p) { return received(p, sys(real.recvfrom(fd, buf, n, flags, from, fromlen))); });
}

FERRY_IO_PATH long recvmsg(int fd, msghdr* msg, int flags) noexcept {
  return io_call(fd, [&](Socket& s) { return upgraded_recvmsg(fd, s, msg, flags); },
                 [&](Path p) {
                   long r = sys(real.recvmsg(fd, msg, flags));
                   if (r >= 0) adopt_passed_fds(msg);
                   return received(p, r);
                 });
}

FERRY_IO_PATH long recvmmsg(int fd, mmsghdr* vec, unsigned n, int flags, timespec* timeout) noexcept {
  Upgraded s{fd};
  if (s) {
    unsigned i = 0;
    for (; i < n; ++i) {
      long r = upgraded_recvmsg(fd, *s, &vec[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags);
      if (r < 0) return i ? static_cast<long>(i) : r;
      vec[i].msg_len = static_cast<unsigned>(r);
      if (r == 0) return i + 1;
    }
    return i;
  }
  long r = sys(real.recvmmsg(fd, vec, n, flags, timeout));
  for (long i = 0; i < r; ++i) {
    adopt_passed_fds(&vec[i].msg_hdr);
    rx(s.tracked, vec[i].msg_len);
  }
  return r;
}

FERRY_IO_PATH long write(int fd, const void* buf, size_t n) noexcept {
  // Most writes are to files, pipes and devices (a verbs provider's doorbell among
  // them): one look at the table sends them on their way.
  return io_call(fd, [&](Socket& s) { return send_one(fd, s, buf, n, 0); },
                 [&](Path p) { return sent(fd, p, sys(real.write(fd, buf, n))); });
}

FERRY_IO_PATH long writev(int fd, const iovec* iov, int iovcnt) noexcept {
  return io_call(fd, [&](Socket& s) { return send_iov(fd, s, iov, iovcnt); },
                 [&](Path p) { return sent(fd, p, sys(real.writev(fd, iov, iovcnt))); });
}

FERRY_IO_PATH long send(int fd, const void* buf, size_t n, int flags) noexcept {
  return io_call(fd, [&](Socket& s) { return send_one(fd, s, buf, n, flags); },
                 [&](Path p) { return sent(fd, p, sys(real.send(fd, buf, n, flags))); });
}

FERRY_IO_PATH long sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t tolen) noexcept {
  return io_call(fd, [&](Socket& s) { return send_one(fd, s, buf, n, flags); },
                 [&](Path p) { return sent(fd, p, sys(real.sendto(fd, buf, n, flags, to, tolen))); });
}

FERRY_IO_PATH long sendmsg(int fd, const msghdr* msg, int flags) noexcept {
  return io_call(fd, [&](Socket& s) { return upgraded_sendmsg(fd, s, msg, flags); },
                 [&](Path p) {
                   if (msg && msg->msg_controllen) handoff::before_passing(msg);
                   return sent(fd, p, sys(real.sendmsg(fd, msg, flags)));
                 });
}

FERRY_IO_PATH long sendmmsg(int fd, mmsghdr* vec, unsigned n, int flags) noexcept {
  Upgraded s{fd};
  if (s) {
    unsigned i = 0;
    for (; i < n; ++i) {
      long r = upgraded_sendmsg(fd, *s, &vec[i].msg_hdr, flags);
      if (r < 0) return i ? static_cast<long>(i) : r;
      vec[i].msg_len = static_cast<unsigned>(r);
    }
    return i;
  }
  for (unsigned i = 0; i < n; ++i)
    if (vec[i].msg_hdr.msg_controllen) handoff::before_passing(&vec[i].msg_hdr);
  long r = sys(real.sendmmsg(fd, vec, n, flags));
  for (long i = 0; i < r; ++i) tx(fd, s.tracked, vec[i].msg_len);
  return r;
}

long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  Upgraded s{out_fd};
  if (s) {
    // Read the file here and send it like a write. The file's position (its own, or
    // *offset) moves by exactly what was sent: a send that takes fewer bytes than were
    // read leaves the rest in the file for the next call.
    off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
    const bool seekable = pos >= 0;
    if (!seekable && errno != ESPIPE) return -errno;
    char buf[65536];
    size_t done = 0;
    long result = 0;
    while (done < count) {
      size_t want = count - done < sizeof buf ? count - done : sizeof buf;
      long r = seekable ? sys(pread(in_fd, buf, want, pos)) : sys(real.read(in_fd, buf, want));
      if (r <= 0) {
        result = r;
        break;
      }
      iovec v{buf, static_cast<size_t>(r)};
      long w = stream::send(out_fd, *s, &v, 1, 0);
      if (w <= 0) {
        result = w;
        break;
      }
      pos += w;
      done += static_cast<size_t>(w);
      if (w < r) break;  // a non-blocking socket filled up (or a signal came)
    }
    if (offset) {
      *offset = pos;
    } else if (seekable) {
      lseek(in_fd, pos, SEEK_SET);
    }
    return done ? static_cast<long>(done) : result;
  }
  return tx(out_fd, s.tracked, sys(real.sendfile(out_fd, in_fd, offset, count)));
}

namespace {
bool is_pipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}
}  // namespace

long splice(int in, loff_t* off_in, int out, loff_t* off_out, size_t len, unsigned flags) noexcept {
  {
    Upgraded src{in};
    if (src) {
      // The kernel's checks, in its order: a socket has no offset, the other end is a pipe.
      if (off_in || !is_pipe(out)) return -EINVAL;
      if (off_out) return -ESPIPE;
      return stream::splice_out(in, *src, out, len, flags);
    }
  }
  {
    Upgraded dst{out};
    if (dst) {
      if (off_out || !is_pipe(in)) return -EINVAL;
      if (off_in) return -ESPIPE;
      return stream::splice_in(in, out, *dst, len, flags);
    }
  }
  long r = sys(real.splice(in, off_in, out, off_out, len, flags));
  if (r > 0) {
    if (fd_table().tracked(in)) rx(true, r);
    if (fd_table().tracked(out)) tx(out, true, r);
  }
  return r;
}

}  // namespace ferry::api
