// close, close_range, closefrom, dup, dup2, dup3, fcntl, fcntl64, ioctl.
#include "preload/export.h"

#include <stdarg.h>

FERRY_EXPORT FERRY_FORK_PATH int close(int fd) {
  return FERRY_RESULT(int, close(fd));
}

FERRY_EXPORT int close_range(unsigned int first, unsigned int last, int flags) {
  return FERRY_RESULT(int, close_range(first, last, flags));
}

// glibc's closefrom calls the close_range system call itself, past the export above.
FERRY_EXPORT void closefrom(int lowfd) {
  ferry::api::closefrom(lowfd);
}

FERRY_EXPORT int dup(int fd) {
  return FERRY_RESULT(int, dup(fd));
}

FERRY_EXPORT int dup2(int fd, int newfd) {
  return FERRY_RESULT(int, dup2(fd, newfd));
}

FERRY_EXPORT int dup3(int fd, int newfd, int flags) {
  return FERRY_RESULT(int, dup3(fd, newfd, flags));
}

// fcntl and ioctl take at most one argument after the command, always a word.
#define FERRY_ONE_VARARG(last, var) \
  va_list ap;                       \
  va_start(ap, last);               \
  void* var = va_arg(ap, void*);    \
  va_end(ap)

FERRY_EXPORT FERRY_IO_PATH int fcntl(int fd, int cmd, ...) {
  FERRY_ONE_VARARG(cmd, arg);
  return FERRY_RESULT(int, fcntl(fd, cmd, arg));
}

FERRY_EXPORT FERRY_IO_PATH int fcntl64(int fd, int cmd, ...) {
  FERRY_ONE_VARARG(cmd, arg);
  return FERRY_RESULT(int, fcntl(fd, cmd, arg));
}

FERRY_EXPORT FERRY_IO_PATH int ioctl(int fd, unsigned long request, ...) {
  FERRY_ONE_VARARG(request, arg);
  return FERRY_RESULT(int, ioctl(fd, request, arg));
}
