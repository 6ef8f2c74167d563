#include "core/poll_mixed.h"

#include "core/api.h"
#include "core/config.h"
#include "core/epoll_set.h"
#include "core/fdtable.h"
#include "core/libc.h"
#include "core/readiness.h"
#include "core/stats.h"

#include <algorithm>
#include <new>
#include <vector>

namespace ferry {
namespace {

constexpr int kKernelEvery = 16;

struct ThreadWaiter final : Waiter {
  readiness::Kicker kicker;
  bool ok = kicker.open();
  void wake() noexcept override { kicker.kick(); }
  bool listening() const noexcept override { return kicker.armed(); }
  bool per_thread() const noexcept override { return true; }
};

ThreadWaiter& thread_waiter() {
  thread_local ThreadWaiter w;
  return w;
}

struct Entry {
  nfds_t index;
  SocketRef socket;
  bool user;  // on RDMA: answered by readiness::of(); otherwise still the kernel's
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

}  // namespace

void poll_mixed_after_fork_child() noexcept {
  ThreadWaiter& w = thread_waiter();
  w.kicker.~Kicker();
  new (&w.kicker) readiness::Kicker;
  w.ok = w.kicker.open();
  scratch().user.clear();
}

bool needs_user_space(const pollfd* fds, nfds_t n) noexcept {
  if (!fds) return false;
  bool user = false;
  for (nfds_t i = 0; i < n; ++i) {
    int fd = fds[i].fd;
    if (fd_table().tracked(fd)) {
      SocketRef s = fd_table().get(fd);
      user = user || (s && s->transport() != Transport::kernel);
    } else if (epoll_sets().tracked(fd)) {
      if (auto set = epoll_sets().get(fd)) set->nested();
    }
  }
  return user;
}

long poll_mixed(pollfd* fds, nfds_t n, int64_t timeout_us, const sigset_t* mask) noexcept {
  ThreadWaiter& w = thread_waiter();
  Scratch& sc = scratch();
  if (!w.ok || sc.user.size() > 0) {
    // No kicker, or a signal handler polling inside a poll: the kernel's answer alone.
    if (timeout_us < 0) return api::sys(real.ppoll(fds, n, nullptr, mask));
    timespec ts = to_timespec(timeout_us);
    return api::sys(real.ppoll(fds, n, &ts, mask));
  }
  sc.kernel.assign(fds, fds + n);
  for (nfds_t i = 0; i < n; ++i) {
    if (!fd_table().tracked(fds[i].fd)) continue;
    SocketRef s = fd_table().get(fds[i].fd);
    if (!s || s->transport() == Transport::kernel) continue;  // the link is published by now
    s->link->signal.add(&w);
    sc.user.push_back({i, std::move(s), false});
  }
  sc.kernel.push_back({w.kicker.fd(), POLLIN, 0});
  Stopwatch clock;
  const int64_t spin_us = config().poll_us;
  long result = 0;
  for (int round = 0;; ++round) {
    int ready = 0;
    bool user = false;  // some entry's readiness is computed here, not by the kernel
    for (Entry& e : sc.user) {
      if (!e.user && readiness::in_user_space(*e.socket)) {
        e.user = true;
        sc.kernel[e.index].fd = -1;  // the kernel socket is idle now; its readiness would mislead
      }
      if (!e.user) continue;
      user = true;
      readiness::drive(*e.socket->link);  // see EpollSet::wait
      fds[e.index].revents = static_cast<short>(user_revents(fds[e.index], e));
      ready += fds[e.index].revents != 0;
    }
    const int64_t elapsed = ready == 0 ? clock.elapsed_us() : 0;  // a call answered at once reads no clock
    const int64_t left = timeout_us < 0 ? -1 : std::max<int64_t>(0, timeout_us - elapsed);
    // Only upgraded sockets are spun on, as by epoll_wait: one still in its handshake
    // (or whose upgrade is held by a peer that never answers) has kernel readiness,
    // which the kernel's sleep below reports; spinning on it would only take the CPU
    // from the peer, on every call until the handshake ends.
    const bool spinning = user && ready == 0 && left != 0 && elapsed < spin_us;
    bool sleep = ready == 0 && left != 0 && !spinning;
    if (sleep) {
      w.kicker.arm();
      bool moved = false;  // an entry reached RDMA since the last look
      for (Entry& e : sc.user) {
        readiness::prepare_sleep(*e.socket->link);  // see EpollSet::prepare_sleep
        if (!e.user) {
          moved = moved || readiness::in_user_space(*e.socket);
          continue;
        }
        fds[e.index].revents = static_cast<short>(user_revents(fds[e.index], e));
        ready += fds[e.index].revents != 0;
      }
      if (ready > 0 || moved) {
        w.kicker.disarm();
        sleep = false;
      }
      if (moved && ready == 0) continue;  // look again from the top
    }
    if (spinning && round % kKernelEvery != 0) continue;
    if (ready > 0) {
      bool kernel_fds = false;
      for (nfds_t i = 0; i < n && !kernel_fds; ++i) kernel_fds = sc.kernel[i].fd >= 0;
      if (!kernel_fds) {  // every descriptor is an upgraded socket (or negative): no system call
        for (nfds_t i = 0; i < n; ++i)
          if (fds[i].fd < 0) fds[i].revents = 0;
        result = ready;
        break;
      }
    }
    if (sleep) stats::add(stats::g.ready_sleeps, 1);
    timespec ts = to_timespec(sleep ? left : 0);
    int k = real.ppoll(sc.kernel.data(), n + 1, sleep && left < 0 ? nullptr : &ts, mask);
    const int err = errno;
    if (sleep) w.kicker.disarm();
    if (k < 0) {
      if (ready > 0) {
        result = ready;
        break;
      }
      result = -err;
      break;
    }
    if (sc.kernel[n].revents) {
      w.kicker.drain();
      --k;
    }
    for (nfds_t i = 0; i < n; ++i)
      if (sc.kernel[i].fd >= 0 || fds[i].fd < 0) fds[i].revents = sc.kernel[i].revents;
    if (ready + k > 0) {
      result = ready + k;
      break;
    }
    if (left == 0) break;
  }
  for (Entry& e : sc.user) e.socket->link->signal.remove(&w);
  sc.user.clear();
  return result;
}

}  // namespace ferry
