// What the stream calls (core/api/stream.h: receive, send, splice) share: the pieces
// of an iovec list a call works through, its deadline, its results at an end, and
// the pipes of splice().
#pragma once

#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/wait.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace ferry::stream::parts {

inline size_t total_of(const iovec* iov, int iovcnt) {
  size_t t = 0;
  for (int i = 0; i < iovcnt; ++i) t += iov[i].iov_len;
  return t;
}

// The part of iov (of `total` bytes) that starts `skip` bytes in and holds at most
// `max` bytes, or only its first 64 vectors' worth (`bytes` says how much it holds: a
// call that moved all of it goes on with the next part). The whole of a short list is
// used in place.
struct Slice {
  const iovec* v;
  int n = 0;
  size_t bytes = 0;
  iovec own[64];
  Slice(const iovec* iov, int iovcnt, size_t skip, size_t max, size_t total) : v(own) {
    if (skip == 0 && max == total && iovcnt <= 64) {
      v = iov;
      n = iovcnt;
      bytes = total;
      return;
    }
    for (int i = 0; i < iovcnt && max > 0 && n < 64; ++i) {
      size_t len = iov[i].iov_len;
      if (skip >= len) {
        skip -= len;
        continue;
      }
      size_t take = std::min(len - skip, max);
      own[n++] = {static_cast<char*>(iov[i].iov_base) + skip, take};
      bytes += take;
      max -= take;
      skip = 0;
    }
  }
};

// A call's deadline from its socket's SO_RCVTIMEO / SO_SNDTIMEO (0: none), fixed at
// its first wait: the timeout bounds the whole call, as the kernel's does.
struct Deadline {
  int64_t at = -1;
  int64_t of(int64_t timeout_us) {
    if (at < 0) at = timeout_us > 0 ? now_us() + timeout_us : 0;
    return at;
  }
};

inline long broken(size_t done, int err) { return done ? static_cast<long>(done) : -err; }

// A receive that reached the end of the stream (0 when nothing came first).
inline long end_of_stream(size_t done, const char* why) {
  if (done == 0) FERRY_LOG(debug, "stream", "end of stream: %s", why);
  return static_cast<long>(done);
}

// Sending on a connection the peer has gone from: EPIPE, and SIGPIPE unless asked not.
inline long epipe(size_t done, int flags) {
  if (done) return static_cast<long>(done);
  if (!(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
  return -EPIPE;
}

// A 64 KiB buffer of this thread's, for calls that move bytes through ferry (splice,
// MSG_TRUNC's discards); null without memory. Made at a thread's first such call: a
// thread_local array would be static TLS, set up (and zeroed) in every thread of every
// program under ferry.
inline constexpr size_t kBounce = 64 * 1024;
inline char* bounce() {
  thread_local std::unique_ptr<char[]> buf;
  if (!buf) buf.reset(new (std::nothrow) char[kBounce]);
  return buf.get();
}



// Room in a pipe, in bytes: its capacity less what it holds. A pipe written by others
// meanwhile may have less; a write of this many then waits for the reader, as a
// splice into that pipe would.
inline long pipe_room(int pipe) {
  int size = real.fcntl(pipe, F_GETPIPE_SZ, 0);
  int held = 0;
  if (size < 0 || real.ioctl(pipe, FIONREAD, &held) != 0) return -errno;
  return size > held ? size - held : 0;
}

// Waits until the pipe is ready for `events` (POLLIN / POLLOUT); -EAGAIN if it is not
// and the caller must not wait, 0 once it is (or its other end is gone: POLLHUP/ERR).
inline long pipe_wait(int pipe, short events, bool nonblock) {
  pollfd p{pipe, events, 0};
  long r = api::sys(real.poll(&p, 1, nonblock ? 0 : -1));
  if (r < 0) return r;
  return r == 0 ? -EAGAIN : 0;
}

inline bool pipe_nonblocking(int pipe, unsigned flags) {
  return (flags & SPLICE_F_NONBLOCK) || (real.fcntl(pipe, F_GETFL, 0) & O_NONBLOCK);
}

}  // namespace ferry::stream::parts
