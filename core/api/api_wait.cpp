// Readiness calls. Upgraded sockets' readiness lives in user space (core/conn/readiness.h):
// poll and select over them run poll_mixed(); epoll instances that hold TCP sockets
// have an EpollSet. Calls that involve no upgraded socket are the kernel's own.
#include "core/api/api.h"
#include "core/base/io_path.h"

#include "core/api/epoll_set.h"
#include "core/api/passthrough.h"
#include "core/api/poll_mixed.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/conn/fdtable.h"
#include "core/conn/poller.h"

#include <sys/select.h>

#include <algorithm>
#include <vector>

namespace ferry::api {
namespace {

int64_t ms_to_us(int ms) { return ms < 0 ? -1 : static_cast<int64_t>(ms) * 1000; }
int64_t ts_to_us(const timespec* ts) { return ts ? ts->tv_sec * 1000000LL + ts->tv_nsec / 1000 : -1; }

bool any_upgraded(int nfds, const fd_set* r, const fd_set* w, const fd_set* e) {
  bool found = false;
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
    if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))) continue;
    pollfd p{fd, 0, 0};
    found = needs_user_space(&p, 1) || found;
  }
  return found;
}

// select over upgraded sockets, as poll: the sets become poll entries and back.
long select_mixed(int nfds, fd_set* r, fd_set* w, fd_set* e, int64_t timeout_us, const sigset_t* mask) {
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
    short ev = 0;
    if (r && FD_ISSET(fd, r)) ev |= POLLIN;
    if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
    if (e && FD_ISSET(fd, e)) ev |= POLLPRI;
    if (ev) fds.push_back({fd, ev, 0});
  }
  long n = poll_mixed(fds.data(), fds.size(), timeout_us, mask);
  if (n < 0) return n;
  for (const pollfd& p : fds)
    if (p.revents & POLLNVAL) return -EBADF;
  if (r) FD_ZERO(r);
  if (w) FD_ZERO(w);
  if (e) FD_ZERO(e);
  long count = 0;
  for (const pollfd& p : fds) {
    // The kernel's select: readable on IN/HUP/ERR, writable on OUT/ERR, except on PRI.
    if ((p.events & POLLIN) && (p.revents & (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR))) {
      FD_SET(p.fd, r);
      ++count;
    }
    if ((p.events & POLLOUT) && (p.revents & (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR))) {
      FD_SET(p.fd, w);
      ++count;
    }
    if ((p.events & POLLPRI) && (p.revents & POLLPRI)) {
      FD_SET(p.fd, e);
      ++count;
    }
  }
  return count;
}

}  // namespace

FERRY_IO_PATH long poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept {
  if (!needs_user_space(fds, n)) return sys(real.poll(fds, n, timeout_ms));
  return poll_mixed(fds, n, ms_to_us(timeout_ms), nullptr);
}

FERRY_IO_PATH long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) noexcept {
  if (!needs_user_space(fds, n)) return sys(real.ppoll(fds, n, timeout, mask));
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000)) return -EINVAL;
  return poll_mixed(fds, n, ts_to_us(timeout), mask);
}

FERRY_IO_PATH long select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) noexcept {
  if (nfds < 0 || !any_upgraded(nfds, r, w, e)) return sys(real.select(nfds, r, w, e, timeout));
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_usec < 0)) return -EINVAL;
  int64_t t = timeout ? timeout->tv_sec * 1000000LL + timeout->tv_usec : -1;
  int64_t start = now_us();
  long n = select_mixed(nfds, r, w, e, t, nullptr);
  if (timeout) {
    // Linux's select leaves the time not slept in *timeout.
    int64_t left = std::max<int64_t>(0, t - (now_us() - start));
    timeout->tv_sec = left / 1000000;
    timeout->tv_usec = left % 1000000;
  }
  return n;
}

FERRY_IO_PATH long pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) noexcept {
  if (nfds < 0 || !any_upgraded(nfds, r, w, e)) return sys(real.pselect(nfds, r, w, e, timeout, mask));
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000)) return -EINVAL;
  return select_mixed(nfds, r, w, e, ts_to_us(timeout), mask);
}

namespace {
// In the per-request text: a server's worker makes its epoll set as it starts.
FERRY_IO_PATH long created(long epfd) {
  if (epfd < 0 || !config().enable) return epfd;
  // Made now, the set sees every epoll_ctl of the instance.
  if (auto set = EpollSet::create()) epoll_sets().set(static_cast<int>(epfd), std::move(set));
  return epfd;
}
}  // namespace

FERRY_IO_PATH long epoll_create(int size) noexcept { return created(sys(real.epoll_create(size))); }
FERRY_IO_PATH long epoll_create1(int flags) noexcept { return created(sys(real.epoll_create1(flags))); }

// The set is told once: its descriptor's mark says it knows.
FERRY_IO_PATH void kernel_member_added(int epfd) noexcept {
  if (epoll_sets().marked(epfd)) return;
  FdMap<EpollSet>::Borrowed set;
  epoll_sets().borrow(epfd, set);
  if (set) {
    set->other_added();
    epoll_sets().mark(epfd, set.get());
  }
}

namespace {
// epoll_ctl on a descriptor whose readiness is the kernel's for good (not a TCP socket
// ferry tracks, or one that never leaves kernel TCP): the kernel's call, and the set
// learns that the kernel holds more than ferry's registrations.
long kernel_ctl(int epfd, int op, int fd, epoll_event* ev) { return sys(kernel_epoll_ctl(epfd, op, fd, ev)); }
}  // namespace

// (A socket on kernel TCP for good takes the export's inline path, kernel_epoll_ctl.)
FERRY_IO_PATH long epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept {
  if (op != EPOLL_CTL_DEL && epoll_sets().tracked(fd)) {
    if (auto inner = epoll_sets().get(fd)) inner->nested();
  }
  {
    FdTable::Borrowed b;
    fd_table().borrow(fd, b);
    if (!b || b->kernel_for_good.load(std::memory_order_acquire)) return kernel_ctl(epfd, op, fd, ev);
  }
  SocketRef s = fd_table().get(fd);
  std::shared_ptr<EpollSet> set = epoll_sets().get(epfd);
  if (!s || !set) {
    if (!s || op != EPOLL_CTL_ADD) return sys(real.epoll_ctl(epfd, op, fd, ev));
    // An instance ferry has not seen created (inherited, or made before ferry loaded):
    // what else it holds is unknown.
    set = EpollSet::create();
    if (!set) return sys(real.epoll_ctl(epfd, op, fd, ev));
    set->others_unknown();
    long r = set->ctl(epfd, op, fd, ev, s);
    if (r == 0) epoll_sets().set(epfd, set);  // epfd is an epoll instance after all
    return r;
  }
  return set->ctl(epfd, op, fd, ev, s);
}

namespace {
// The set of epfd when ferry must answer for it; null when the kernel's answer is all:
// the set never held a TCP socket, or no socket of this process can leave kernel TCP.
FERRY_IO_PATH std::shared_ptr<EpollSet> active_set(int epfd) {
  {
    FdMap<EpollSet>::Borrowed set;
    epoll_sets().borrow(epfd, set);
    if (!set || set->plain() || (poller::unavailable() && set->users() == 0)) return nullptr;
  }
  return epoll_sets().get(epfd);  // held across the wait
}
}  // namespace

FERRY_IO_PATH long epoll_wait(int epfd, epoll_event* evs, int max, int timeout_ms) noexcept {
  if (auto set = active_set(epfd))
    return set->wait(epfd, evs, max, ms_to_us(timeout_ms), nullptr);
  return sys(real.epoll_wait(epfd, evs, max, timeout_ms));
}

FERRY_IO_PATH long epoll_pwait(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask) noexcept {
  if (auto set = active_set(epfd))
    return set->wait(epfd, evs, max, ms_to_us(timeout_ms), mask);
  return sys(real.epoll_pwait(epfd, evs, max, timeout_ms, mask));
}

FERRY_IO_PATH long epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout, const sigset_t* mask) noexcept {
  auto set = active_set(epfd);
  if (!set) return sys(real.epoll_pwait2(epfd, evs, max, timeout, mask));
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000)) return -EINVAL;
  return set->wait(epfd, evs, max, ts_to_us(timeout), mask);
}

}  // namespace ferry::api
