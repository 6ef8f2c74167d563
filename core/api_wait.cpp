// Readiness calls. Readiness of upgraded sockets does not live in user space yet, so a
// socket the program waits on with epoll/poll/select is kept on TCP, where the kernel's
// answer is the exact answer.
#include "core/api.h"

#include "core/fdtable.h"
#include "core/log.h"

namespace ferry::api {
namespace {

void observe(int fd) noexcept {
  if (!fd_table().tracked(fd)) return;
  SocketRef s = fd_table().get(fd);
  if (!s || s->observed.exchange(true)) return;
  if (s->transport() == Transport::rdma) {
    FERRY_LOG(warn, "readiness", "fd %d is already on RDMA: epoll/poll/select on it is not supported yet", fd);
  }
}

void observe(const pollfd* fds, nfds_t n) noexcept {
  if (!fds) return;
  for (nfds_t i = 0; i < n; ++i) observe(fds[i].fd);
}

void observe(int nfds, const fd_set* r, const fd_set* w, const fd_set* e) noexcept {
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd)
    if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) observe(fd);
}

}  // namespace

long poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept {
  observe(fds, n);
  return sys(real.poll(fds, n, timeout_ms));
}

long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) noexcept {
  observe(fds, n);
  return sys(real.ppoll(fds, n, timeout, mask));
}

long select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) noexcept {
  observe(nfds, r, w, e);
  return sys(real.select(nfds, r, w, e, timeout));
}

long pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) noexcept {
  observe(nfds, r, w, e);
  return sys(real.pselect(nfds, r, w, e, timeout, mask));
}

long epoll_create(int size) noexcept { return sys(real.epoll_create(size)); }
long epoll_create1(int flags) noexcept { return sys(real.epoll_create1(flags)); }
long epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept {
  if (op != EPOLL_CTL_DEL) observe(fd);
  return sys(real.epoll_ctl(epfd, op, fd, ev));
}

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
