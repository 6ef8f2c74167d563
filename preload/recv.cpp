// read, readv, recv, recvfrom, recvmsg, recvmmsg.
#include "preload/export.h"

FERRY_EXPORT ssize_t read(int fd, void* buf, size_t n) {
  return FERRY_RESULT(ssize_t, read(fd, buf, n));
}

FERRY_EXPORT ssize_t readv(int fd, const iovec* iov, int iovcnt) {
  return FERRY_RESULT(ssize_t, readv(fd, iov, iovcnt));
}

FERRY_EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return FERRY_RESULT(ssize_t, recv(fd, buf, n, flags));
}

FERRY_EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* fromlen) {
  return FERRY_RESULT(ssize_t, recvfrom(fd, buf, n, flags, from, fromlen));
}

FERRY_EXPORT ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  return FERRY_RESULT(ssize_t, recvmsg(fd, msg, flags));
}

FERRY_EXPORT int recvmmsg(int fd, mmsghdr* vec, unsigned int n, int flags, timespec* timeout) {
  return FERRY_RESULT(int, recvmmsg(fd, vec, n, flags, timeout));
}
