// Readiness calls. Every descriptor is a kernel descriptor while no socket is upgraded,
// so the kernel's answer is the exact answer.
#include "core/api.h"

namespace ferry::api {

long poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept { return sys(real.poll(fds, n, timeout_ms)); }

long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) noexcept {
  return sys(real.ppoll(fds, n, timeout, mask));
}

long select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) noexcept {
  return sys(real.select(nfds, r, w, e, timeout));
}

long pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) noexcept {
  return sys(real.pselect(nfds, r, w, e, timeout, mask));
}

long epoll_create(int size) noexcept { return sys(real.epoll_create(size)); }
long epoll_create1(int flags) noexcept { return sys(real.epoll_create1(flags)); }
long epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept { return sys(real.epoll_ctl(epfd, op, fd, ev)); }

long epoll_wait(int epfd, epoll_event* evs, int max, int timeout_ms) noexcept {
  return sys(real.epoll_wait(epfd, evs, max, timeout_ms));
}

long epoll_pwait(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask) noexcept {
  return sys(real.epoll_pwait(epfd, evs, max, timeout_ms, mask));
}

long epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout, const sigset_t* mask) noexcept {
  return sys(real.epoll_pwait2(epfd, evs, max, timeout, mask));
}

}  // namespace ferry::api
