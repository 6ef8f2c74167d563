// Receiving on a tracked stream socket: recv and its flags (MSG_PEEK, MSG_WAITALL,
// MSG_TRUNC, zero-length reads) and splice to a pipe: from TCP up to the peer's
// cutover point, then from the ring.
#include "core/api/stream.h"
#include "core/api/stream_parts.h"

#include "core/base/config.h"
#include "core/base/contract.h"
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

// A zero-length receive returns 0 once there is something to read (or the stream
// ended), and blocks until then, as the kernel's TCP does.
long zero_length(int fd, Socket& s, Link& link, bool nonblock) {
  Deadline deadline;
  for (;;) {
    const uint32_t seen = link.signal.load();
    if (s.transport() == Transport::kernel) return api::sys(real.recv(fd, nullptr, 0, nonblock ? MSG_DONTWAIT : 0));
    if (link.rd_shut || link.down()) return 0;
    long r = stream::readable(fd, s);
    if (r != 0) return r < 0 ? r : 0;
    char c;
    if (real.recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0 && !link.established()) return 0;
    if (link.established()) {
      std::lock_guard<Lock> lock(link.channel->mu());
      if (link.channel->peer_fin() || link.channel->failed()) return 0;
    }
    if (nonblock) return -EAGAIN;
    int w = wait_for(link, seen, deadline.of(s.rcvtimeo_us.load()));
    if (w < 0) return w;
  }
}

// A peek at the kernel socket's first `want` bytes (4 KiB at most); its result (0: TCP
// ended; -1 with errno: nothing there, or failed) and, when it found bytes, how many
// of them come before where a proof of the server's Welcome nonce starts or may start.
long peek_before_proof(int fd, const Link& link, size_t want, size_t& before) {
  uint8_t head[4096];
  const long k = real.recv(fd, head, std::min(want, sizeof head), MSG_PEEK | MSG_DONTWAIT);
  if (k > 0) before = wire::proof_start(head, static_cast<size_t>(k), link.welcome_nonce);
  return k;
}

// What one look at the receive side decided.
struct RxStep {
  enum Next { done, again, wait, kernel, cutover_wait, down } next;
  long result = 0;  // with done
};

// One look at the receive side, with the socket's rx_mu held: takes what the kernel
// socket (up to the peer's cutover point) or the ring holds now, into iov past `got`;
// done once `target` bytes are in. Never sleeps.
RxStep look_rx_locked(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags,
                      size_t target, size_t& got) {
  FERRY_HELD(s.rx_mu);
  const bool peek = flags & MSG_PEEK;
  if (link.rd_shut) return {RxStep::done, static_cast<long>(got)};
  if (s.transport() == Transport::kernel) return {RxStep::kernel};
  if (link.down(std::memory_order_relaxed)) return {RxStep::down};
  const bool est = link.established();
  bool cut_known = false, from_ring = false, fin = false, dead = false, prove = false;
  downgrade::Why why = downgrade::Why::failed;
  uint64_t cut = 0;
  size_t ring_bytes = 0;
  if (est) {
    // One look under the lock: news from the CQ, and the ring once TCP's part is read.
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    // Bytes found in the ring need no poll of the CQ once the cutover is known: the
    // news it brings (credits, the end of the stream) can wait for the next empty look.
    // Before that, the ring's bytes (found by any look, readiness's among them) come
    // after a cutover that is still on the CQ.
    if (!ch.peer_cutover_known() || (ch.readable_locked() == 0 && !ch.poll_ring_locked())) ch.poll_all_locked();
    cut_known = ch.peer_cutover_known();
    cut = ch.peer_cutover();
    // The client's proof comes next on TCP (core/conn/binding.h): nothing of the ring counts
    // before it.
    prove = cut_known && link.tcp_received >= cut && !ch.trusted();
    if (cut_known && link.tcp_received >= cut && !prove) {
      from_ring = true;
      Slice rest(iov, iovcnt, got, total - got, total);
      ring_bytes = ch.recv_locked(rest.v, rest.n, peek);
      fin = ch.peer_fin();
      dead = downgrade::leaving_locked(link, ch, why);
    }
  }
  if (prove) {
    switch (binding::look(fd, link)) {
      case binding::Verdict::wait: return {RxStep::wait};
      case binding::Verdict::refused:
        downgrade::want(link, downgrade::Why::forged);  // TCP carries the rest as it is
        return {RxStep::down};
      case binding::Verdict::proven:
        send_side::cut_over_now(fd, s, link);
        return {RxStep::again};
    }
  }
  if (from_ring) {
    if (ring_bytes > 0) {
      if (!peek) {
        stats::add(stats::g.bytes_rdma_received, ring_bytes);
        conn_report::received(link.report, ring_bytes);
      }
      got += ring_bytes;
      if (got >= target) return {RxStep::done, static_cast<long>(got)};
      return {RxStep::again};
    }
    if (fin) return {RxStep::done, end_of_stream(got, "the peer finished")};
    if (dead) {
      downgrade::want(link, why);  // the stream goes on over TCP
      return {RxStep::again};
    }
    if (downgrade::tcp_took_over(fd, link, why)) {
      downgrade::want(link, downgrade::confirmed(link, why));
      return {RxStep::again};
    }
    return {RxStep::wait};
  }
  // Bytes the peer sent on TCP before it switched.
  size_t want = total - got;
  std::optional<long> peeked;
  // A server that answered its client's request does not know the client's cutover
  // point until the handshake settles, and the client's proof may already follow its
  // bytes (Link::answered): it reads the bytes before where the proof starts, and
  // waits once the proof is all there is. Settled since the look above: look again,
  // at the cutover point it may have brought.
  if (!est && link.answered.load()) {
    const ConnState now = link.state();
    if (was_established(now)) return {RxStep::again};
    if (now == ConnState::handshake) {
      size_t before = 0;
      const long k = peek_before_proof(fd, link, want, before);
      // A peek that found nothing stands for the read: one after it could take a
      // proof that came meanwhile.
      if (k <= 0) peeked = k;
      else if (before == 0) return {RxStep::wait};
      else want = before;
    }
  }
  if (cut_known) want = std::min<uint64_t>(want, cut - link.tcp_received);
  if (est && !cut_known && !peek) {
    // The peer may have cut over, been confirmed and gone back to TCP since the look
    // above: its header would follow its cutover point on TCP, and the cutover message
    // is in the completion queue by the time the header is in the kernel (downgrade.h). So
    // peek, look at the queue again, and take no more than the cutover point allows.
    Slice look(iov, iovcnt, got, want, total);
    msghdr pm{};
    pm.msg_iov = const_cast<iovec*>(look.v);
    pm.msg_iovlen = static_cast<size_t>(look.n);
    const long p = real.recvmsg(fd, &pm, MSG_PEEK | MSG_DONTWAIT);
    // Nothing there (or the end, or an error): so it stays. A read now could take bytes
    // that came since, past a cutover point this look has not seen.
    if (p <= 0) {
      peeked = p;
    } else {
      want = static_cast<size_t>(p);
      std::lock_guard<Lock> lock(link.channel->mu());
      link.channel->poll_all_locked();
      if (link.channel->peer_cutover_known()) {
        want = std::min<uint64_t>(want, link.channel->peer_cutover() - link.tcp_received);
        if (want == 0) return {RxStep::again};
      }
    }
  }
  Slice part(iov, iovcnt, got, want, total);
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(part.v);
  m.msg_iovlen = static_cast<size_t>(part.n);
  long r = peeked ? *peeked : real.recvmsg(fd, &m, (flags & MSG_PEEK) | MSG_DONTWAIT);
  if (r > 0 && peek && est && !cut_known) {
    // A peek shows no byte past the peer's cutover point either (its proof, a header):
    // the cutover message is on the queue by the time they are in the kernel.
    std::lock_guard<Lock> lock(link.channel->mu());
    link.channel->poll_all_locked();
    if (link.channel->peer_cutover_known()) {
      const uint64_t left = link.channel->peer_cutover() - link.tcp_received;
      if (left == 0) return {RxStep::again};
      if (static_cast<uint64_t>(r) > left) r = static_cast<long>(left);
    }
  }
  if (r > 0) {
    if (!est && !link.client && link.spoke_ns.load(std::memory_order_relaxed) == 0) upgrade::peer_spoke(s.link);
    if (!peek) {
      link.tcp_received += static_cast<uint64_t>(r);
      stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
    }
    got += static_cast<size_t>(r);
    if (got >= target) return {RxStep::done, static_cast<long>(got)};
    return {RxStep::again};
  }
  if (r < 0 && errno != EAGAIN) return {RxStep::done, broken(got, errno)};
  if (r == 0) {
    // TCP ended. Without an upgrade, or with a peer that left before cutting over,
    // that is the end of the stream.
    if (!est || link.peer_gone.load()) return {RxStep::done, end_of_stream(got, "TCP ended before an upgrade")};
    if (cut_known) return {RxStep::done, broken(got, ECONNRESET)};  // TCP ended short of the cutover point
    // The peer switched and closed: its cutover is on the way over RDMA. A peer
    // that never switched cannot send one, so the wait is bounded.
    if (got > 0) return {RxStep::done, static_cast<long>(got)};
    return {RxStep::cutover_wait};
  }
  return {RxStep::wait};
}

// The peer switched and closed: its cutover is on its way over RDMA (a peer that never
// switched sends none, so the wait is bounded). A non-blocking call does not wait for
// it, and a blocking one no longer than its SO_RCVTIMEO: both say EAGAIN, as a read
// with nothing there yet. 1: look again; else what the receive returns.
long await_cutover(Socket& s, Link& link, uint32_t seen, Deadline& deadline, bool nonblock) {
  if (nonblock) return -EAGAIN;
  const int64_t bound = now_us() + static_cast<int64_t>(config().upgrade_timeout_ms) * 1000;
  const int64_t mine = deadline.of(s.rcvtimeo_us.load());
  const bool timeout = mine > 0 && mine < bound;
  const int w = wait_for(link, seen, timeout ? mine : bound);
  if (w == -EAGAIN) return timeout ? -EAGAIN : end_of_stream(0, "TCP ended and no cutover came");
  return w < 0 ? w : 1;
}

RxStep look_rx(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags, size_t target,
               size_t& got) {
  std::lock_guard<Lock> rx(s.rx_mu);
  return look_rx_locked(fd, s, link, iov, iovcnt, total, flags, target, got);
}

// A receive on a connection going back to TCP (core/conn/downgrade.h), past `got` bytes (fewer
// than `target`).
long recv_down(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags, bool nonblock,
               size_t target, size_t got, Deadline& deadline) {
  for (;;) {
    const uint32_t seen = link.signal.load();
    long r;
    {
      std::lock_guard<Lock> rx(s.rx_mu);
      if (link.rd_shut) return static_cast<long>(got);
      Slice rest(iov, iovcnt, got, total - got, total);
      r = downgrade::look_rx(fd, link, rest.v, rest.n, flags);
    }
    downgrade::finish_if_done(link);
    if (r == downgrade::kNothing) {
      if (nonblock) return broken(got, EAGAIN);
      int w = wait_for(link, seen, deadline.of(s.rcvtimeo_us.load()));
      if (w < 0) return broken(got, -w);
      continue;
    }
    if (r < 0) return broken(got, static_cast<int>(-r));
    if (r == 0) return end_of_stream(got, "TCP ended after a downgrade");
    got += static_cast<size_t>(r);
    if (got >= target) return static_cast<long>(got);
  }
}

}  // namespace

namespace {

// MSG_TRUNC on TCP: the bytes are taken (or, with MSG_PEEK, counted) but not copied;
// the program's buffer may even be null. Up to 1 MiB per look; MSG_WAITALL looks again.
long discard(int fd, Socket& s, size_t n, int flags) noexcept {
  char* sink = bounce();
  if (!sink) return -ENOMEM;
  size_t done = 0;
  do {
    iovec v[16];
    int k = 0;
    for (size_t left = n - done; left > 0 && k < 16; ++k) {
      v[k] = {sink, std::min(left, kBounce)};
      left -= v[k].iov_len;
    }
    long r = recv(fd, s, v, k, flags);
    if (r <= 0) return done ? static_cast<long>(done) : r;
    done += static_cast<size_t>(r);
  } while (done < n && (flags & MSG_WAITALL) && !(flags & MSG_PEEK));
  return static_cast<long>(done);
}

// A receive of `total` bytes (more than none) that returns once it holds `target` of
// them, or cannot have more now (see recv).
long receive(int fd, Socket& s, const iovec* iov, int iovcnt, int flags, size_t total, size_t target,
             bool nonblock) noexcept {
  Link& link = *s.link;
  size_t got = 0;
  Deadline deadline;
  for (;;) {
    const uint32_t seen = link.signal.load();
    const RxStep step = look_rx(fd, s, link, iov, iovcnt, total, flags, target, got);
    if (step.next == RxStep::done) return step.result;
    if (step.next == RxStep::again) continue;
    if (step.next == RxStep::down)
      return recv_down(fd, s, link, iov, iovcnt, total, flags, nonblock, target, got, deadline);
    if (step.next == RxStep::kernel) {
      // The upgrade gave up: the rest is plain TCP, blocking as the program asked (the
      // kernel serializes its callers; ferry holds nothing across the call).
      if (got && (!(flags & MSG_WAITALL) || (flags & MSG_PEEK))) return static_cast<long>(got);
      Slice rest(iov, iovcnt, got, total - got, total);
      msghdr m{};
      m.msg_iov = const_cast<iovec*>(rest.v);
      m.msg_iovlen = static_cast<size_t>(rest.n);
      long r = api::sys(real.recvmsg(fd, &m, flags));
      if (r < 0) return broken(got, static_cast<int>(-r));
      stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
      got += static_cast<size_t>(r);
      // MSG_WAITALL over a longer vector list than one part holds: the next part.
      if (r > 0 && static_cast<size_t>(r) == rest.bytes && got < total && (flags & MSG_WAITALL) && !(flags & MSG_PEEK))
        continue;
      return static_cast<long>(got);
    }
    if (step.next == RxStep::cutover_wait) {
      const long r = await_cutover(s, link, seen, deadline, nonblock);
      if (r <= 0) return r;
      continue;
    }
    if (nonblock) return broken(got, EAGAIN);
    int w = wait_for(link, seen, deadline.of(s.rcvtimeo_us.load()));
    if (w < 0) return broken(got, -w);
  }
}

// A blocking peek that waits for `want` bytes (MSG_WAITALL's whole request, or
// SO_RCVLOWAT's mark), or until no more can come: the stream ends, fails or times
// out, or the ring is half full of unread bytes (then it shows what there is, as
// the kernel's does once its receive queue is full). Peeks again from the start each
// time more has come.
long peek_until(int fd, Socket& s, const iovec* iov, int iovcnt, int flags, size_t total, size_t want) noexcept {
  Link& link = *s.link;
  Deadline deadline;
  size_t shown = 0;
  for (;;) {
    const uint32_t seen = link.signal.load();
    const long r = receive(fd, s, iov, iovcnt, flags & ~MSG_WAITALL, total, 1, false);
    if (r <= 0 || static_cast<size_t>(r) >= want) return r;
    // Only the ring is peeked here; a receive on TCP is the kernel's own.
    if (s.transport() != Transport::rdma || link.down() || link.rd_shut) return r;
    {
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      ch.poll_all_locked();
      if (ch.readable_locked() > static_cast<size_t>(r)) {
        // More came since: peek again. A peek that shows no more than the last one
        // (one part of a long vector list) is what there is to show.
        if (static_cast<size_t>(r) <= shown) return r;
        shown = static_cast<size_t>(r);
        continue;
      }
      if (ch.peer_fin() || ch.failed() || link.peer_gone.load() || ch.rx_half_full_locked()) return r;
    }
    if (wait_for(link, seen, deadline.of(s.rcvtimeo_us.load())) < 0) return r;
  }
}

}  // namespace

long recv(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept {
  if ((flags & MSG_TRUNC) && !(flags & MSG_OOB)) return discard(fd, s, total_of(iov, iovcnt), flags & ~MSG_TRUNC);
  if (flags & MSG_OOB) return api::sys(real.recv(fd, iovcnt ? iov[0].iov_base : nullptr, iovcnt ? iov[0].iov_len : 0, flags));
  const size_t total = total_of(iov, iovcnt);
  const bool nonblock = (flags & MSG_DONTWAIT) || s.nonblocking.load();
  if (s.link->arm.load(std::memory_order_relaxed) == Link::undecided) upgrade::first_data_call(fd, s);
  Link& link = *s.link;
  if (link.orphaned) return -ECONNRESET;
  if (total == 0) return zero_length(fd, s, link, nonblock);
  // As the kernel's: a blocking receive returns once it holds min(SO_RCVLOWAT, len)
  // bytes (all of them with MSG_WAITALL), or with fewer when the stream ends, fails, a
  // signal comes or SO_RCVTIMEO runs out; a non-blocking one takes what there is.
  size_t target = 1;
  if (!nonblock) {
    const size_t lowat = static_cast<size_t>(link.rcvlowat.load(std::memory_order_relaxed));
    target = (flags & MSG_WAITALL) ? total : std::min(lowat, total);
  }
  if (flags & MSG_PEEK) {
    if (target > 1 && link.established()) return peek_until(fd, s, iov, iovcnt, flags, total, target);
    target = 1;  // a peek shows bytes from the start each time: it cannot add to them
  }
  return receive(fd, s, iov, iovcnt, flags, total, target, nonblock);
}

long splice_out(int fd, Socket& s, int pipe, size_t len, unsigned flags) noexcept {
  if (len == 0) return 0;
  if (s.link->arm.load(std::memory_order_relaxed) == Link::undecided) upgrade::first_data_call(fd, s);
  Link& link = *s.link;
  if (link.orphaned) return -ECONNRESET;
  char* buf = bounce();
  if (!buf) return -ENOMEM;
  Deadline deadline;
  for (;;) {
    const uint32_t seen = link.signal.load();
    long room = pipe_room(pipe);
    if (room < 0) return room;
    if (room == 0) {
      long w = pipe_wait(pipe, POLLOUT, pipe_nonblocking(pipe, flags));
      if (w < 0) return w;
      continue;
    }
    const size_t n = std::min({len, static_cast<size_t>(room), kBounce});
    RxStep step{RxStep::wait};
    {
      // Peek, hand to the pipe, then take exactly what it took: one look under rx_mu,
      // so no other reader comes between.
      std::lock_guard<Lock> rx(s.rx_mu);
      size_t got = 0;
      iovec v{buf, n};
      step = look_rx_locked(fd, s, link, &v, 1, n, MSG_PEEK, 1, got);
      if (step.next == RxStep::done && step.result > 0) {
        long w = api::sys(real.write(pipe, buf, static_cast<size_t>(step.result)));
        if (w <= 0) return w;
        for (size_t taken = 0; taken < static_cast<size_t>(w);) {
          iovec t{buf, static_cast<size_t>(w) - taken};
          size_t k = 0;
          RxStep again = look_rx_locked(fd, s, link, &t, 1, t.iov_len, 0, 1, k);
          if (again.next != RxStep::done || again.result <= 0) break;  // cannot happen: they were there
          taken += k;
        }
        return w;
      }
    }
    if (step.next == RxStep::done) return step.result;  // end of stream, or an error
    if (step.next == RxStep::again) continue;
    if (step.next == RxStep::down) {
      // Peek, hand to the pipe, take what it took (a reader of the same socket meanwhile
      // would be racing the kernel's splice too).
      iovec v{buf, n};
      const bool nb = s.nonblocking.load();
      long r = recv_down(fd, s, link, &v, 1, n, MSG_PEEK, nb, 1, 0, deadline);
      if (r <= 0) return r;
      long w = api::sys(real.write(pipe, buf, static_cast<size_t>(r)));
      if (w <= 0) return w;
      v.iov_len = static_cast<size_t>(w);
      recv_down(fd, s, link, &v, 1, v.iov_len, MSG_WAITALL, nb, v.iov_len, 0, deadline);
      return w;
    }
    if (step.next == RxStep::kernel) {
      long r = api::sys(real.splice(fd, nullptr, pipe, nullptr, len, flags));
      if (r > 0) stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
      return r;
    }
    if (step.next == RxStep::cutover_wait) {
      const long r = await_cutover(s, link, seen, deadline, s.nonblocking.load());
      if (r <= 0) return r;
      continue;
    }
    if (s.nonblocking.load()) return -EAGAIN;  // the socket's own flag decides, as the kernel's splice
    int w = wait_for(link, seen, deadline.of(s.rcvtimeo_us.load()));
    if (w < 0) return w;
  }
}

}  // namespace ferry::stream
