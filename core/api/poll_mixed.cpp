#include "core/api/poll_mixed.h"

#include "core/api/api.h"
#include "core/api/epoll_set.h"
#include "core/base/config.h"
#include "core/base/libc.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"
#include "core/conn/fdtable.h"
#include "core/conn/readiness.h"

#include <new>
#include <vector>

namespace ferry {
namespace {

struct ThreadWaiter final : Waiter {
  readiness::Kicker kicker;
  bool ok = kicker.open();
  bool reopen = false;  // in a forked child, until its first use
  void wake() noexcept override { kicker.kick(); }
  bool listening() const noexcept override { return kicker.armed(); }
  bool per_thread() const noexcept override { return true; }
};

// Whether this thread has made its waiter (a thread that never polled an upgraded
// socket has none, and a forked child of it needs none made).
thread_local bool t_waiter_made = false;

ThreadWaiter& thread_waiter() {
  thread_local ThreadWaiter w;
  t_waiter_made = true;
  return w;
}

struct Entry {
  nfds_t index;
  SocketRef socket;
  bool user;  // on RDMA: answered by readiness::of(); otherwise still the kernel's
  // Its kernel socket holds only its client's proof while its handshake settles
  // (binding::proof_only): not ready, and out of the kernel's array until it settles.
  bool held = false;
};

// Scratch kept per thread so that a steady poll loop allocates nothing.
struct Scratch {
  std::vector<pollfd> kernel;
  std::vector<Entry> user;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

int user_revents(const pollfd& p, Entry& e) {
  readiness::State st = readiness::of(p.fd, *e.socket->link);
  return static_cast<int>(st.events & (static_cast<uint32_t>(p.events) | POLLERR | POLLHUP));
}

timespec to_timespec(int64_t us) { return timespec{us / 1000000, (us % 1000000) * 1000}; }

// wait_loop's steps for one poll call: upgraded entries are looked at in user space,
// everything else (and the Kicker, the last entry of the kernel's array) by ppoll.
struct PollSteps {
  pollfd* fds;
  const nfds_t n;
  const sigset_t* mask;
  ThreadWaiter& w;
  Scratch& sc;

  int look(bool first) noexcept {
    int ready = 0;
    for (Entry& e : sc.user) {
      if (e.held && e.socket->link->state() != ConnState::handshake) {
        e.held = false;  // settled: RDMA's readiness, or the kernel's again
        sc.kernel[e.index].fd = fds[e.index].fd;
      }
      if (!e.user && readiness::in_user_space(*e.socket)) {
        e.user = true;
        sc.kernel[e.index].fd = -1;  // the kernel socket is idle now; its readiness would mislead
      }
      if (!e.user) continue;
      readiness::drive(*e.socket->link, first);  // see EpollSet::wait
      fds[e.index].revents = static_cast<short>(user_revents(fds[e.index], e));
      ready += fds[e.index].revents != 0;
    }
    return ready;
  }
  // Only upgraded sockets are spun on, as by epoll_wait: one still in its handshake (or
  // whose upgrade is held by a peer that never answers) has kernel readiness, which the
  // kernel's sleep reports; spinning on it would only take the CPU from the peer, on
  // every call until the handshake ends.
  bool spins() const noexcept {
    for (const Entry& e : sc.user)
      if (e.user) return true;
    return false;
  }
  int arm() noexcept {
    w.kicker.arm();
    int ready = 0;
    bool moved = false;  // an entry reached RDMA since the last look: look again
    for (Entry& e : sc.user) {
      readiness::prepare_sleep(*e.socket->link);  // see EpollSet::prepare_sleep
      if (!e.user) {
        moved = moved || readiness::in_user_space(*e.socket) ||
                (e.held && e.socket->link->state() != ConnState::handshake);
        continue;
      }
      fds[e.index].revents = static_cast<short>(user_revents(fds[e.index], e));
      ready += fds[e.index].revents != 0;
    }
    return ready > 0 ? ready : moved ? -1 : 0;
  }
  void disarm() noexcept { w.kicker.disarm(); }
  // Every descriptor an upgraded socket (or negative): no system call once one is ready.
  bool look_kernel(int found, Stopwatch&) const noexcept {
    if (found == 0) return true;
    for (nfds_t i = 0; i < n; ++i)
      if (sc.kernel[i].fd >= 0) return true;
    return false;
  }
  long kernel(int, int64_t timeout_us, Stopwatch&) noexcept {
    if (timeout_us != 0) stats::add(stats::g.ready_sleeps, 1);
    timespec ts = to_timespec(timeout_us);
    const int k = real.ppoll(sc.kernel.data(), n + 1, timeout_us < 0 ? nullptr : &ts, mask);
    return k < 0 ? -errno : k;
  }
  long reap(int found, long k) noexcept {
    if (sc.kernel[n].revents) {
      w.kicker.drain();
      --k;
    }
    for (Entry& e : sc.user) {
      pollfd& kp = sc.kernel[e.index];
      if (e.user || kp.fd < 0 || !(kp.revents & (POLLIN | POLLRDNORM)) || !binding::proof_only(kp.fd, *e.socket->link))
        continue;
      kp.revents &= static_cast<short>(~(POLLIN | POLLRDNORM));
      if (kp.revents != 0) continue;  // what else it reports (POLLOUT) stands
      --k;
      e.held = true;  // the settling wakes this call (the link's signal)
      fds[e.index].revents = 0;
      kp.fd = -1;
    }
    for (nfds_t i = 0; i < n; ++i)
      if (sc.kernel[i].fd >= 0) fds[i].revents = sc.kernel[i].revents;
    return found + k;
  }
};

}  // namespace

void poll_mixed_after_fork_child() noexcept {
  // The inherited kicker is the parent's eventfd. A fresh one is opened at the child's
  // first poll over an upgraded socket, not here (see core/process/forking.h).
  if (!t_waiter_made) return;
  ThreadWaiter& w = thread_waiter();
  w.kicker.~Kicker();
  new (&w.kicker) readiness::Kicker;
  w.ok = false;
  w.reopen = true;
  scratch().user.clear();
}

bool needs_user_space(const pollfd* fds, nfds_t n) noexcept {
  if (!fds) return false;
  bool user = false;
  for (nfds_t i = 0; i < n; ++i) {
    int fd = fds[i].fd;
    // One byte for a socket on kernel TCP for good, and a borrow for another: a
    // reference count is a write, to a page a forking server's last child shares.
    const uint8_t state = fd_table().state(fd);
    if (state & FdTable::kBound) {
      if (user || (state & FdTable::kMarked)) continue;
      FdTable::Borrowed s;
      fd_table().borrow(fd, s);
      user = s && s->transport() != Transport::kernel;
    } else if (epoll_sets().tracked(fd)) {
      FdMap<EpollSet>::Borrowed set;
      epoll_sets().borrow(fd, set);
      if (set) set->nested();
    }
  }
  return user;
}

long poll_mixed(pollfd* fds, nfds_t n, int64_t timeout_us, const sigset_t* mask) noexcept {
  ThreadWaiter& w = thread_waiter();
  if (w.reopen) {
    w.reopen = false;
    w.ok = w.kicker.open();
  }
  Scratch& sc = scratch();
  if (!w.ok || sc.user.size() > 0) {
    // No kicker, or a signal handler polling inside a poll: the kernel's answer alone.
    if (timeout_us < 0) return api::sys(real.ppoll(fds, n, nullptr, mask));
    timespec ts = to_timespec(timeout_us);
    return api::sys(real.ppoll(fds, n, &ts, mask));
  }
  sc.kernel.assign(fds, fds + n);
  for (nfds_t i = 0; i < n; ++i) {
    if (fds[i].fd < 0) fds[i].revents = 0;  // the kernel's answer for an entry it ignores
    if (!fd_table().tracked(fds[i].fd)) continue;
    SocketRef s = fd_table().get(fds[i].fd);
    if (!s || s->transport() == Transport::kernel) continue;  // the link is published by now
    s->link->signal.add(&w);
    sc.user.push_back({i, std::move(s), false});
  }
  sc.kernel.push_back({w.kicker.fd(), POLLIN, 0});
  PollSteps steps{fds, n, mask, w, sc};
  const long result = wait_loop(steps, timeout_us, config().poll_us, spin_budget());
  for (Entry& e : sc.user) e.socket->link->signal.remove(&w);
  sc.user.clear();
  return result;
}

}  // namespace ferry
