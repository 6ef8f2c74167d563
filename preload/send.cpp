// write, writev, send, sendto, sendmsg, sendmmsg, sendfile.
#include "preload/export.h"

FERRY_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  return FERRY_RESULT(ssize_t, write(fd, buf, n));
}

FERRY_EXPORT ssize_t writev(int fd, const iovec* iov, int iovcnt) {
  return FERRY_RESULT(ssize_t, writev(fd, iov, iovcnt));
}

FERRY_EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
  return FERRY_RESULT(ssize_t, send(fd, buf, n, flags));
}

FERRY_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t tolen) {
  return FERRY_RESULT(ssize_t, sendto(fd, buf, n, flags, to, tolen));
}

FERRY_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  return FERRY_RESULT(ssize_t, sendmsg(fd, msg, flags));
}

FERRY_EXPORT int sendmmsg(int fd, mmsghdr* vec, unsigned int n, int flags) {
  return FERRY_RESULT(int, sendmmsg(fd, vec, n, flags));
}

FERRY_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return FERRY_RESULT(ssize_t, sendfile(out_fd, in_fd, offset, count));
}

// off_t is 64 bits on every target ferry builds for, so the two are the same call.
FERRY_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t* offset, size_t count) {
  return FERRY_RESULT(ssize_t, sendfile(out_fd, in_fd, offset, count));
}
