// poll, ppoll, select, pselect and the epoll family.
#include "core/api/passthrough.h"
#include "preload/export.h"

FERRY_EXPORT FERRY_IO_PATH int poll(pollfd* fds, nfds_t n, int timeout_ms) {
  return FERRY_RESULT(int, poll(fds, n, timeout_ms));
}

FERRY_EXPORT FERRY_IO_PATH int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  return FERRY_RESULT(int, ppoll(fds, n, timeout, mask));
}

FERRY_EXPORT FERRY_IO_PATH int select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  return FERRY_RESULT(int, select(nfds, r, w, e, timeout));
}

FERRY_EXPORT FERRY_IO_PATH int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  return FERRY_RESULT(int, pselect(nfds, r, w, e, timeout, mask));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_create(int size) {
  return FERRY_RESULT(int, epoll_create(size));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_create1(int flags) {
  return FERRY_RESULT(int, epoll_create1(flags));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
  if (ferry::fd_table().marked(fd)) return ferry::api::kernel_epoll_ctl(epfd, op, fd, ev);
  return FERRY_RESULT(int, epoll_ctl(epfd, op, fd, ev));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_wait(int epfd, epoll_event* evs, int max, int timeout_ms) {
  return FERRY_RESULT(int, epoll_wait(epfd, evs, max, timeout_ms));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_pwait(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask) {
  return FERRY_RESULT(int, epoll_pwait(epfd, evs, max, timeout_ms, mask));
}

FERRY_EXPORT FERRY_IO_PATH int epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout, const sigset_t* mask) {
  return FERRY_RESULT(int, epoll_pwait2(epfd, evs, max, timeout, mask));
}
