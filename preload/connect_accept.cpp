// connect, accept, accept4.
#include "preload/export.h"

FERRY_EXPORT FERRY_IO_PATH int connect(int fd, const sockaddr* addr, socklen_t len) {
  return FERRY_RESULT(int, connect(fd, addr, len));
}

FERRY_EXPORT FERRY_IO_PATH int accept(int fd, sockaddr* addr, socklen_t* len) {
  return FERRY_RESULT(int, accept(fd, addr, len));
}

FERRY_EXPORT FERRY_IO_PATH int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return FERRY_RESULT(int, accept4(fd, addr, len, flags));
}
