// write, writev, send, sendto, sendmsg, sendmmsg, sendfile.
#include "core/api/passthrough.h"
#include "preload/export.h"

using ferry::real;
using ferry::api::Path;
using ferry::api::path_of;
using ferry::api::sent;

FERRY_EXPORT FERRY_IO_PATH ssize_t write(int fd, const void* buf, size_t n) {
  if (const Path p = path_of(fd); p != Path::look) return sent(fd, p, real.write(fd, buf, n));
  return FERRY_RESULT(ssize_t, write(fd, buf, n));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t writev(int fd, const iovec* iov, int iovcnt) {
  if (const Path p = path_of(fd); p != Path::look) return sent(fd, p, real.writev(fd, iov, iovcnt));
  return FERRY_RESULT(ssize_t, writev(fd, iov, iovcnt));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t send(int fd, const void* buf, size_t n, int flags) {
  if (const Path p = path_of(fd); p != Path::look) return sent(fd, p, real.send(fd, buf, n, flags));
  return FERRY_RESULT(ssize_t, send(fd, buf, n, flags));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t tolen) {
  if (const Path p = path_of(fd); p != Path::look) return sent(fd, p, real.sendto(fd, buf, n, flags, to, tolen));
  return FERRY_RESULT(ssize_t, sendto(fd, buf, n, flags, to, tolen));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  return FERRY_RESULT(ssize_t, sendmsg(fd, msg, flags));
}

FERRY_EXPORT FERRY_IO_PATH int sendmmsg(int fd, mmsghdr* vec, unsigned int n, int flags) {
  return FERRY_RESULT(int, sendmmsg(fd, vec, n, flags));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return FERRY_RESULT(ssize_t, sendfile(out_fd, in_fd, offset, count));
}

// off_t is 64 bits on every target ferry builds for, so the two are the same call.
FERRY_EXPORT FERRY_IO_PATH ssize_t sendfile64(int out_fd, int in_fd, off_t* offset, size_t count) {
  return FERRY_RESULT(ssize_t, sendfile(out_fd, in_fd, offset, count));
}
