// glibc's _FORTIFY_SOURCE entry points that programs link instead of the plain calls.
// Each checks the buffer size as glibc does, then takes the normal path.
#include "preload/export.h"

extern "C" [[noreturn]] void __chk_fail(void);

FERRY_EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return FERRY_RESULT(ssize_t, read(fd, buf, n));
}

FERRY_EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  if (n > buflen) __chk_fail();
  return FERRY_RESULT(ssize_t, recv(fd, buf, n, flags));
}

FERRY_EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* from,
                                    socklen_t* fromlen) {
  if (n > buflen) __chk_fail();
  return FERRY_RESULT(ssize_t, recvfrom(fd, buf, n, flags, from, fromlen));
}

FERRY_EXPORT int __poll_chk(pollfd* fds, nfds_t n, int timeout_ms, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return FERRY_RESULT(int, poll(fds, n, timeout_ms));
}

FERRY_EXPORT int __ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return FERRY_RESULT(int, ppoll(fds, n, timeout, mask));
}
