// socket, bind, listen, shutdown, socket options and names.
#include "preload/export.h"

FERRY_EXPORT FERRY_IO_PATH int socket(int domain, int type, int protocol) {
  return FERRY_RESULT(int, socket(domain, type, protocol));
}

FERRY_EXPORT int bind(int fd, const sockaddr* addr, socklen_t len) {
  return FERRY_RESULT(int, bind(fd, addr, len));
}

FERRY_EXPORT int listen(int fd, int backlog) {
  return FERRY_RESULT(int, listen(fd, backlog));
}

FERRY_EXPORT FERRY_IO_PATH int shutdown(int fd, int how) {
  return FERRY_RESULT(int, shutdown(fd, how));
}

FERRY_EXPORT FERRY_IO_PATH int getsockopt(int fd, int level, int name, void* val, socklen_t* len) {
  return FERRY_RESULT(int, getsockopt(fd, level, name, val, len));
}

FERRY_EXPORT FERRY_IO_PATH int setsockopt(int fd, int level, int name, const void* val, socklen_t len) {
  return FERRY_RESULT(int, setsockopt(fd, level, name, val, len));
}

FERRY_EXPORT FERRY_IO_PATH int getsockname(int fd, sockaddr* addr, socklen_t* len) {
  return FERRY_RESULT(int, getsockname(fd, addr, len));
}

FERRY_EXPORT FERRY_IO_PATH int getpeername(int fd, sockaddr* addr, socklen_t* len) {
  return FERRY_RESULT(int, getpeername(fd, addr, len));
}
