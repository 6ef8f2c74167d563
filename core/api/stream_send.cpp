// Sending on a tracked stream socket (send, and splice from a pipe): over TCP until
// the send side cut over, then into the ring; going back to TCP, after its backlog.
#include "core/api/stream.h"
#include "core/api/stream_parts.h"

#include "core/base/config.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/base/wait.h"
#include "core/conn/binding.h"
#include "core/conn/downgrade.h"
#include "core/conn/handoff.h"
#include "core/conn/link.h"
#include "core/conn/link_wait.h"
#include "core/conn/poller.h"
#include "core/conn/readiness.h"
#include "core/conn/send_side.h"
#include "core/conn/upgrade.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <memory>
#include <new>
#include <optional>

namespace ferry::stream {
using namespace parts;

namespace {

// Bytes that go by TCP before the send side cut over: the kernel's call under tx_mu,
// never asleep there (MSG_DONTWAIT), so that tcp_sent counts every byte TCP carries
// before the cutover. A sender that found no room waits for some without any lock or
// count (wait_tcp_room): a signal handler that leaves the call by siglongjmp, as it may
// from any blocking call, leaves nothing behind that a cutover or shutdown would wait
// for. Once the upgrade failed no cutover can come: the kernel's blocking call then.
long send_before_cutover(int fd, Link& link, const iovec* iov, int iovcnt, int flags, size_t sent) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  // After a partial send the kernel reports the count, never a SIGPIPE.
  long r = api::sys(real.sendmsg(fd, &m, (sent ? flags | MSG_NOSIGNAL : flags) | MSG_DONTWAIT));
  if (r > 0) {
    link.tcp_sent += static_cast<uint64_t>(r);
    stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
  }
  return r;
}

long send_kernel(int fd, const iovec* iov, int iovcnt, int flags, size_t sent) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  long r = api::sys(real.sendmsg(fd, &m, sent ? flags | MSG_NOSIGNAL : flags));
  if (r > 0) stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
  return r;
}

// The splice of send_before_cutover: under tx_mu, asleep in the kernel at most one
// tick of its clock (a socket's blocking is its own, not the call's: SO_SNDTIMEO is
// set that short for the call, then back to the program's). The pipe is not waited
// for either: what the caller saw there may have been taken meanwhile.
long splice_before_cutover(int pipe, int fd, Socket& s, Link& link, size_t len, unsigned flags) {
  const bool shortened = !s.nonblocking.load();
  if (shortened) {
    const timeval tick{0, 1};
    real.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tick, sizeof tick);
  }
  long r = api::sys(real.splice(pipe, nullptr, fd, nullptr, len, flags | SPLICE_F_NONBLOCK));
  if (shortened) {
    const int64_t us = s.sndtimeo_us.load();
    const timeval program{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
    real.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &program, sizeof program);
  }
  if (r > 0) {
    link.tcp_sent += static_cast<uint64_t>(r);
    stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
  }
  return r;
}

// No room in TCP before the cutover: waits for some (the poller's watch reports it,
// upgrade::watch_now), or for the call's deadline. 0 to look again, or -errno. Without
// a watch (the program closed the descriptor it had, and sends on a duplicate) the
// wait is cut in slices, after each of which the caller looks again; with one it is
// the kernel's: a signal handler with SA_RESTART resumes it, as it would a send.
int wait_tcp_room(int fd, Link& link, uint32_t seen, Deadline& deadline, int64_t timeout_us) {
  constexpr int64_t kSliceUs = 50000;
  // Room already (the pipe of a splice was what it lacked), or an error the next call
  // reports: no wait. Without room, this look also makes the kernel report the next.
  pollfd p{fd, POLLOUT, 0};
  if (real.poll(&p, 1, 0) == 1) return 0;
  link.tcp_send_wait.store(true);
  bool watched;
  {
    std::lock_guard<Lock> w(link.watch_mu);
    watched = !link.unwatched && (link.watching.load() || link.watch_idle.load());
  }
  const int64_t until = deadline.of(timeout_us);
  if (watched) return wait_for(link, seen, until);
  const int64_t slice = now_us() + kSliceUs;
  const int w = wait_for(link, seen, until > 0 ? std::min(until, slice) : slice);
  if (w == -EAGAIN && (until == 0 || now_us() < until)) return 0;
  return w;
}

// A send on a connection whose RDMA side broke: a reset the kernel socket received is
// reported once, as the kernel's send would (ECONNRESET, no SIGPIPE); after that, EPIPE.
long send_on_dead(int fd, size_t sent, int flags) {
  int err = 0;
  socklen_t len = sizeof err;
  if (!sent && real.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) return -err;
  return epipe(sent, flags);
}

}  // namespace

namespace {

// A send on a connection going back to TCP (core/conn/downgrade.h), past `sent` bytes: after
// the backlog, straight to the kernel.
long send_down(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags, bool nonblock,
               size_t sent, Deadline& deadline) {
  for (;;) {
    const uint32_t seen = link.signal.load();
    int err = 0;
    const downgrade::Send how = downgrade::look_tx(fd, link, err, true);
    downgrade::finish_if_done(link);
    if (how == downgrade::Send::dead) {
      if (err == 0 || err == EPIPE) return send_on_dead(fd, sent, flags);
      if (sent) return static_cast<long>(sent);
      downgrade::error_taken(link);  // as the kernel's socket error: once, then EPIPE
      return -err;
    }
    if (how == downgrade::Send::direct) {
      Slice rest(iov, iovcnt, sent, total - sent, total);
      msghdr m{};
      m.msg_iov = const_cast<iovec*>(rest.v);
      m.msg_iovlen = static_cast<size_t>(rest.n);
      long r = api::sys(real.sendmsg(fd, &m, sent ? flags | MSG_NOSIGNAL : flags));
      if (r < 0) return broken(sent, static_cast<int>(-r));
      stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
      sent += static_cast<size_t>(r);
      if (static_cast<size_t>(r) == rest.bytes && sent < total) continue;  // the next part
      return static_cast<long>(sent);
    }
    if (nonblock) return broken(sent, EAGAIN);
    int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
    if (w < 0) return broken(sent, -w);
  }
}

}  // namespace

long send(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept {
  const size_t total = total_of(iov, iovcnt);
  const bool nonblock = (flags & MSG_DONTWAIT) || s.nonblocking.load();
  if (s.link->arm.load(std::memory_order_relaxed) == Link::undecided) upgrade::first_data_call(fd, s);
  Link& link = *s.link;
  // Urgent data has no place in the ring: the connection goes to TCP (a hand-off, with
  // the peer's help) and the kernel sends it, as everything after it.
  if ((flags & MSG_OOB) && link.established() && !link.inherited) handoff::to_tcp(fd, s);
  size_t sent = 0;
  Deadline deadline;
  for (;;) {
    if (link.down(std::memory_order_relaxed) && !link.inherited)
      return send_down(fd, s, link, iov, iovcnt, total, flags, nonblock, sent, deadline);
    const uint32_t seen = link.signal.load();
    size_t k = 0;
    bool dead = false, read_past = false;
    downgrade::Why why = downgrade::Why::failed;
    {
      std::unique_lock<Lock> tx(s.tx_mu);
      bool by_tcp = !link.established() || s.transport() == Transport::kernel;
      if (!by_tcp && !link.tx_cut && !(flags & MSG_OOB) && !link.orphaned && !link.fin_sent && !link.tx_left.load()) {
        const send_side::Cut cut = send_side::cut_over(fd, s, link);
        if (cut == send_side::Cut::failed) {
          downgrade::want(link, downgrade::Why::failed);  // the channel failed: the stream goes on over TCP
          continue;
        }
        by_tcp = cut == send_side::Cut::later;
      }
      if (by_tcp) {
        Slice rest(iov, iovcnt, sent, total - sent, total);
        if (s.transport() == Transport::kernel) {
          tx.unlock();
          long r = send_kernel(fd, rest.v, rest.n, flags, sent);
          if (r < 0) return broken(sent, static_cast<int>(-r));
          sent += static_cast<size_t>(r);
          // A blocking kernel send returns short only when it was interrupted or timed
          // out; a part of a longer vector list that went whole is followed by the next.
          if (static_cast<size_t>(r) == rest.bytes && sent < total) continue;
          return static_cast<long>(sent);
        }
        long r = send_before_cutover(fd, link, rest.v, rest.n, flags, sent);
        tx.unlock();
        if (r < 0 && r != -EAGAIN) return broken(sent, static_cast<int>(-r));
        if (r > 0) sent += static_cast<size_t>(r);
        if (r >= 0 && sent == total) return static_cast<long>(sent);  // (0 of 0: at once)
        if (r > 0 && static_cast<size_t>(r) == rest.bytes) continue;  // the next part
        if (nonblock) return broken(sent, EAGAIN);
        int w = wait_tcp_room(fd, link, seen, deadline, s.sndtimeo_us.load());
        if (w < 0) return broken(sent, -w);
        continue;
      }
      if (flags & MSG_OOB) return broken(sent, EOPNOTSUPP);  // the hand-off failed
      if (link.orphaned || link.fin_sent) {
        tx.unlock();  // a SIGPIPE handler (the program's own) may send on it or close it
        return epipe(sent, flags);
      }
      if (link.tx_left.load()) continue;  // going back to TCP
      if (link.proof_due.load()) send_side::write_proof(fd, link, false);
      if (total == 0) return 0;
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      if (!ch.fits_locked(total - sent)) ch.poll_all_locked();
      dead = downgrade::leaving_locked(link, ch, why);
      read_past = ch.peer_cutover_known() && link.tcp_received.load() >= ch.peer_cutover();
      Slice rest(iov, iovcnt, sent, total - sent, total);
      k = dead ? 0 : ch.send_locked(rest.v, rest.n, total - sent);
    }
    if (dead) {
      downgrade::want(link, why);  // the stream goes on over TCP
      continue;
    }
    if (k == 0 && read_past && downgrade::tcp_took_over(fd, link, why)) {
      downgrade::want(link, downgrade::confirmed(link, why));
      continue;
    }
    sent += k;
    stats::add(stats::g.bytes_rdma_sent, k);
    conn_report::sent(link.report, k);
    if (sent == total) return static_cast<long>(sent);
    if (nonblock) return broken(sent, EAGAIN);
    if (k > 0) continue;
    int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
    if (w < 0) return broken(sent, -w);
  }
}

long splice_in(int pipe, int fd, Socket& s, size_t len, unsigned flags) noexcept {
  if (len == 0) return 0;
  if (s.link->arm.load(std::memory_order_relaxed) == Link::undecided) upgrade::first_data_call(fd, s);
  Link& link = *s.link;
  char* buf = bounce();
  if (!buf) return -ENOMEM;
  Deadline deadline;
  for (;;) {
    int held = 0;
    if (real.ioctl(pipe, FIONREAD, &held) != 0) return -errno;
    if (held == 0) {
      pollfd p{pipe, POLLIN, 0};
      long r = api::sys(real.poll(&p, 1, pipe_nonblocking(pipe, flags) ? 0 : -1));
      if (r < 0) return r;
      if (r == 0) return -EAGAIN;
      if (!(p.revents & POLLIN)) return 0;  // every writer has gone: the pipe's end
      continue;
    }
    const uint32_t seen = link.signal.load();
    bool dead = false;
    downgrade::Why why = downgrade::Why::failed;
    if (link.down()) {
      int err = 0;
      const downgrade::Send how = downgrade::look_tx(fd, link, err, true);
      if (how == downgrade::Send::dead) return send_on_dead(fd, 0, 0);
      if (how == downgrade::Send::direct) {
        long r = api::sys(real.splice(pipe, nullptr, fd, nullptr, len, flags));
        if (r > 0) stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
        return r;
      }
      if (s.nonblocking.load()) return -EAGAIN;
      int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
      if (w < 0) return w;
      continue;
    }
    {
      std::unique_lock<Lock> tx(s.tx_mu);
      bool by_tcp = !link.established() || s.transport() == Transport::kernel;
      if (!by_tcp && !link.tx_cut && !link.orphaned && !link.fin_sent) {
        const send_side::Cut cut = send_side::cut_over(fd, s, link);
        if (cut == send_side::Cut::failed) {
          downgrade::want(link, downgrade::Why::failed);
          continue;
        }
        by_tcp = cut == send_side::Cut::later;
      }
      if (by_tcp) {
        // TCP still carries this side's bytes: the kernel's splice, counted like a send.
        if (s.transport() == Transport::kernel) {
          tx.unlock();
          long r = api::sys(real.splice(pipe, nullptr, fd, nullptr, len, flags));
          if (r > 0) stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
          return r;
        }
        long r = splice_before_cutover(pipe, fd, s, link, len, flags);
        tx.unlock();
        if (r >= 0 || (r != -EAGAIN && r != -EINTR)) return r;
        // Another reader of the pipe took what was there: the pipe is waited for again.
        if (int left = 0; real.ioctl(pipe, FIONREAD, &left) == 0 && left == 0) continue;
        // No room (or a signal, put off while tx_mu was held and delivered now).
        if (s.nonblocking.load()) return -EAGAIN;
        int w = wait_tcp_room(fd, link, seen, deadline, s.sndtimeo_us.load());
        if (w < 0) return w;
        continue;
      }
      if (link.orphaned || link.fin_sent) {
        tx.unlock();
        return epipe(0, 0);
      }
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      if (ch.room_locked() == 0) ch.poll_all_locked();
      dead = downgrade::leaving_locked(link, ch, why);
      const size_t room = dead ? 0 : ch.room_locked();
      if (room > 0) {
        // Only what the connection takes now leaves the pipe.
        const size_t n = std::min({len, static_cast<size_t>(held), room, kBounce});
        long r = api::sys(real.read(pipe, buf, n));
        if (r <= 0) return r;
        iovec v{buf, static_cast<size_t>(r)};
        const size_t k = ch.send_locked(&v, 1, static_cast<size_t>(r));
        stats::add(stats::g.bytes_rdma_sent, k);
        conn_report::sent(link.report, k);
        return static_cast<long>(k);
      }
    }
    if (dead) {
      downgrade::want(link, why);
      continue;
    }
    if (s.nonblocking.load()) return -EAGAIN;
    int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
    if (w < 0) return w;
  }
}

}  // namespace ferry::stream
