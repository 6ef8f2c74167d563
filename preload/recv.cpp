// read, readv, recv, recvfrom, recvmsg, recvmmsg.
#include "core/api/passthrough.h"
#include "preload/export.h"

using ferry::real;
using ferry::api::Path;
using ferry::api::path_of;
using ferry::api::received;

FERRY_EXPORT FERRY_IO_PATH ssize_t read(int fd, void* buf, size_t n) {
  if (const Path p = path_of(fd); p != Path::look) return received(p, real.read(fd, buf, n));
  return FERRY_RESULT(ssize_t, read(fd, buf, n));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t readv(int fd, const iovec* iov, int iovcnt) {
  if (const Path p = path_of(fd); p != Path::look) return received(p, real.readv(fd, iov, iovcnt));
  return FERRY_RESULT(ssize_t, readv(fd, iov, iovcnt));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t recv(int fd, void* buf, size_t n, int flags) {
  if (const Path p = path_of(fd); p != Path::look) return received(p, real.recv(fd, buf, n, flags));
  return FERRY_RESULT(ssize_t, recv(fd, buf, n, flags));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* fromlen) {
  if (const Path p = path_of(fd); p != Path::look) return received(p, real.recvfrom(fd, buf, n, flags, from, fromlen));
  return FERRY_RESULT(ssize_t, recvfrom(fd, buf, n, flags, from, fromlen));
}

FERRY_EXPORT FERRY_IO_PATH ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  return FERRY_RESULT(ssize_t, recvmsg(fd, msg, flags));
}

FERRY_EXPORT FERRY_IO_PATH int recvmmsg(int fd, mmsghdr* vec, unsigned int n, int flags, timespec* timeout) {
  return FERRY_RESULT(int, recvmmsg(fd, vec, n, flags, timeout));
}
