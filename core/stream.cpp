#include "core/stream.h"

#include "core/binding.h"

#include "core/config.h"
#include "core/down.h"
#include "core/libc.h"
#include "core/link.h"
#include "core/log.h"
#include "core/poller.h"
#include "core/readiness.h"
#include "core/stats.h"
#include "core/upgrade.h"
#include "core/wait.h"

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
namespace {

size_t total_of(const iovec* iov, int iovcnt) {
  size_t t = 0;
  for (int i = 0; i < iovcnt; ++i) t += iov[i].iov_len;
  return t;
}

// The part of iov (of `total` bytes) that starts `skip` bytes in and holds at most
// `max` bytes, or only its first 64 vectors' worth (`bytes` says how much it holds: a
// call that moved all of it goes on with the next part). The whole of a short list is
// used in place.
struct Slice {
  const iovec* v;
  int n = 0;
  size_t bytes = 0;
  iovec own[64];
  Slice(const iovec* iov, int iovcnt, size_t skip, size_t max, size_t total) : v(own) {
    if (skip == 0 && max == total && iovcnt <= 64) {
      v = iov;
      n = iovcnt;
      bytes = total;
      return;
    }
    for (int i = 0; i < iovcnt && max > 0 && n < 64; ++i) {
      size_t len = iov[i].iov_len;
      if (skip >= len) {
        skip -= len;
        continue;
      }
      size_t take = std::min(len - skip, max);
      own[n++] = {static_cast<char*>(iov[i].iov_base) + skip, take};
      bytes += take;
      max -= take;
      skip = 0;
    }
  }
};

// Sleeps until the link's signal moves past `seen`, at most until `deadline_us` (0: no
// limit). A link still in its handshake is not spun on: its bytes come from the kernel,
// whose arrivals the poller announces, and spinning would take the CPU the peer may
// need (a connection whose upgrade never completes would spin on every call).
int wait_for(Link& link, uint32_t seen, int64_t deadline_us) {
  stats::add(stats::g.waits, 1);
  int64_t timeout = 0;
  if (deadline_us > 0) {
    timeout = deadline_us - now_us();
    if (timeout <= 0) return -EAGAIN;
  }
  Progress p;
  // Never the thorough look: a blocking call's answer is no snapshot. Its caller has
  // just looked itself, and what it missed is found by a later spin (which polls the
  // queue now and then) or by prepare_sleep before any sleep.
  p.poll = [](void* l, bool) { return readiness::drive(*static_cast<Link*>(l), false); };
  p.prepare_sleep = [](void* l) {
    Link& link = *static_cast<Link*>(l);
    upgrade::watch_for_sleeper(link);  // during the handshake only TCP wakes it
    readiness::prepare_sleep(link);
  };
  p.arg = &link;
  return wait_change(link.signal, seen, timeout, link.established() ? config().poll_us : 0, p);
}

// A call's deadline from its socket's SO_RCVTIMEO / SO_SNDTIMEO (0: none), fixed at
// its first wait: the timeout bounds the whole call, as the kernel's does.
struct Deadline {
  int64_t at = -1;
  int64_t of(int64_t timeout_us) {
    if (at < 0) at = timeout_us > 0 ? now_us() + timeout_us : 0;
    return at;
  }
};

long broken(size_t done, int err) { return done ? static_cast<long>(done) : -err; }

// A receive that reached the end of the stream (0 when nothing came first).
long end_of_stream(size_t done, const char* why) {
  if (done == 0) FERRY_LOG(debug, "stream", "end of stream: %s", why);
  return static_cast<long>(done);
}

// Sending on a connection the peer has gone from: EPIPE, and SIGPIPE unless asked not.
long epipe(size_t done, int flags) {
  if (done) return static_cast<long>(done);
  if (!(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
  return -EPIPE;
}

// A zero-length receive returns 0 once there is something to read (or the stream
// ended), and blocks until then, as the kernel's TCP does.
long zero_length(int fd, Socket& s, Link& link, bool nonblock) {
  Deadline deadline;
  for (;;) {
    const uint32_t seen = link.signal.load();
    if (s.transport() == Transport::kernel) return api::sys(real.recv(fd, nullptr, 0, nonblock ? MSG_DONTWAIT : 0));
    if (link.rd_shut || link.down.load()) return 0;
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

// A 64 KiB buffer of this thread's, for calls that move bytes through ferry (splice,
// MSG_TRUNC's discards); null without memory. Made at a thread's first such call: a
// thread_local array would be static TLS, set up (and zeroed) in every thread of every
// program under ferry.
constexpr size_t kBounce = 64 * 1024;
char* bounce() {
  thread_local std::unique_ptr<char[]> buf;
  if (!buf) buf.reset(new (std::nothrow) char[kBounce]);
  return buf.get();
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
  const bool peek = flags & MSG_PEEK;
  if (link.rd_shut) return {RxStep::done, static_cast<long>(got)};
  if (s.transport() == Transport::kernel) return {RxStep::kernel};
  if (link.down.load(std::memory_order_relaxed)) return {RxStep::down};
  const bool est = link.established();
  bool cut_known = false, from_ring = false, fin = false, dead = false, prove = false;
  down::Why why = down::Why::failed;
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
    if (!ch.peer_cutover_known() || (ch.readable_st() == 0 && !ch.scan_st())) ch.progress_st();
    cut_known = ch.peer_cutover_known();
    cut = ch.peer_cutover();
    // The client's proof comes next on TCP (core/binding.h): nothing of the ring counts
    // before it.
    prove = cut_known && link.tcp_received >= cut && !ch.trusted();
    if (cut_known && link.tcp_received >= cut && !prove) {
      from_ring = true;
      Slice rest(iov, iovcnt, got, total - got, total);
      ring_bytes = ch.recv_st(rest.v, rest.n, peek);
      fin = ch.peer_fin();
      dead = down::leaving_st(link, ch, why);
    }
  }
  if (prove) {
    switch (binding::look(fd, link)) {
      case binding::Verdict::wait: return {RxStep::wait};
      case binding::Verdict::refused:
        down::want(link, down::Why::forged);  // TCP carries the rest as it is
        return {RxStep::down};
      case binding::Verdict::proven:
        cut_over_now(fd, s, link);
        return {RxStep::again};
    }
  }
  if (from_ring) {
    if (ring_bytes > 0) {
      if (!peek) stats::add(stats::g.bytes_rdma_received, ring_bytes);
      got += ring_bytes;
      if (got >= target) return {RxStep::done, static_cast<long>(got)};
      return {RxStep::again};
    }
    if (fin) return {RxStep::done, end_of_stream(got, "the peer finished")};
    if (dead) {
      down::want(link, why);  // the stream goes on over TCP
      return {RxStep::again};
    }
    if (down::tcp_took_over(fd, link, why)) {
      down::want(link, down::confirmed(link, why));
      return {RxStep::again};
    }
    return {RxStep::wait};
  }
  // A server that answered its client's request waits for the handshake to settle
  // before it reads on: the client's proof may follow its bytes (Link::answered).
  // Settled since the look above: look again, at the cutover point it may have brought.
  if (!est && link.answered.load()) {
    const Link::Phase phase = link.phase.load();
    if (phase == Link::Phase::handshake) return {RxStep::wait};
    if (phase == Link::Phase::established) return {RxStep::again};
  }
  // Bytes the peer sent on TCP before it switched.
  size_t want = total - got;
  if (cut_known) want = std::min<uint64_t>(want, cut - link.tcp_received);
  std::optional<long> peeked;
  if (est && !cut_known && !peek) {
    // The peer may have cut over, been confirmed and gone back to TCP since the look
    // above: its header would follow its cutover point on TCP, and the cutover message
    // is in the completion queue by the time the header is in the kernel (down.h). So
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
      link.channel->progress_st();
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
    link.channel->progress_st();
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

RxStep look_rx(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags, size_t target,
               size_t& got) {
  std::lock_guard<Lock> rx(s.rx_mu);
  return look_rx_locked(fd, s, link, iov, iovcnt, total, flags, target, got);
}

// A receive on a connection going back to TCP (core/down.h), past `got` bytes (fewer
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
      r = down::look_rx(fd, link, rest.v, rest.n, flags);
    }
    down::finish_if_done(link);
    if (r == down::kNothing) {
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
      int w = wait_for(link, seen, now_us() + static_cast<int64_t>(config().upgrade_timeout_ms) * 1000);
      if (w == -EAGAIN) return end_of_stream(0, "TCP ended and no cutover came");
      if (w < 0) return w;
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
    if (s.transport() != Transport::rdma || link.down.load() || link.rd_shut) return r;
    {
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      ch.progress_st();
      if (ch.readable_st() > static_cast<size_t>(r)) {
        // More came since: peek again. A peek that shows no more than the last one
        // (one part of a long vector list) is what there is to show.
        if (static_cast<size_t>(r) <= shown) return r;
        shown = static_cast<size_t>(r);
        continue;
      }
      if (ch.peer_fin() || ch.failed() || link.peer_gone.load() || ch.rx_half_full_st()) return r;
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

namespace {

// The kernel's call for bytes that go by TCP (before the send side cut over, or after
// the upgrade gave up), made without the socket's lock so that a blocking send sleeps
// in the kernel with the kernel's own semantics (timeouts, signals, shutdown from
// another thread) and other threads' calls go on meanwhile. tcp_senders keeps the
// cutover from happening while it runs.
// A kernel send that began with ++link.tcp_senders under tx_mu has returned r.
long tcp_send_done(Socket& s, Link& link, long r) {
  std::lock_guard<Lock> tx(s.tx_mu);
  if (r > 0) {
    link.tcp_sent += static_cast<uint64_t>(r);
    stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
  }
  --link.tcp_senders;
  return r;
}

long send_tcp(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, int flags, size_t sent) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  // After a partial send the kernel reports the count, never a SIGPIPE.
  return tcp_send_done(s, link, api::sys(real.sendmsg(fd, &m, sent ? flags | MSG_NOSIGNAL : flags)));
}

// A send on a connection whose RDMA side broke: a reset the kernel socket received is
// reported once, as the kernel's send would (ECONNRESET, no SIGPIPE); after that, EPIPE.
long send_on_dead(int fd, size_t sent, int flags) {
  int err = 0;
  socklen_t len = sizeof err;
  if (!sent && real.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) return -err;
  return epipe(sent, flags);
}

// The largest value a tcp_wmem / tcp_rmem sysctl lets a buffer grow to.
uint64_t sysctl_max(const char* path, uint64_t fallback) {
  int f = ::open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return fallback;
  char buf[128] = {};
  long n = real.read(f, buf, sizeof buf - 1);
  real.close(f);
  unsigned long lo, mid, hi;
  if (n <= 0 || sscanf(buf, "%lu %lu %lu", &lo, &mid, &hi) != 3) return fallback;
  return hi;
}

uint64_t queue_limit(const Socket& s, const Channel& ch) {
  static const uint64_t wmem = sysctl_max("/proc/sys/net/ipv4/tcp_wmem", 4u << 20);
  static const uint64_t rmem = sysctl_max("/proc/sys/net/ipv4/tcp_rmem", 6u << 20);
  return send_queue_limit(static_cast<uint64_t>(s.sndbuf.load()), wmem, rmem, ch.peer_ring_st());
}

}  // namespace

// The poller's retries of a client's proof that could not go at its cutover.
void proof_retry_st(const std::weak_ptr<Link>& weak, int tries) noexcept;

Cut cut_over(int fd, Socket& s, Link& link) noexcept {
  if (link.tx_cut) return Cut::done;
  // The client proves it holds the TCP connection right at its cutover point
  // (core/binding.h): only while its TCP side can still carry the proof.
  if (link.client && (fd < 0 || link.fin_sent.load())) return Cut::later;
  {
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    if (link.tx_left.load() || link.handed_off.load()) return Cut::failed;  // going back to TCP: the ring takes nothing
    if (ch.peer_handoff()) {
      // The peer reads TCP only from now on: this side never cuts over.
      down::want(link, down::Why::handoff);
      return Cut::failed;
    }
    // The server's bytes go by TCP until the client has proven itself.
    if (!link.client && !ch.trusted()) return ch.failed() ? Cut::failed : Cut::later;
    // Confirmed: a downgrade resends over TCP only once the peer surely knows where the
    // ring's bytes begin (core/down.h).
    if (!ch.post_control_st(wire::Control{wire::Op::cutover, link.tcp_sent}, true)) return Cut::failed;
    link.tx_cut = true;
    ch.set_queue_limit_st(queue_limit(s, ch));
    // The program ended its sending side on TCP before the upgrade settled: nothing
    // follows the cutover point but the end of the stream.
    if (link.fin_sent.load()) ch.finish_st();
    if (link.client) {
      link.proof = ch.proof();
      link.proof_due.store(true);
    }
  }
  if (!link.client) return Cut::done;
  // Right behind the cutover point on TCP, once the server has our cutover message; the
  // bytes sent from now on wait in the send queue until the server answers the proof
  // (Op::bound).
  if (!write_proof(fd, link, false)) poller::post([weak = std::weak_ptr<Link>(s.link)] { proof_retry_st(weak, 0); });
  return Cut::done;
}

bool write_proof(int fd, Link& link, bool wait) noexcept {
  if (!link.proof_due.load()) return true;
  const int64_t until = now_us() + (wait ? std::chrono::microseconds(binding::kPatience).count() : 0);
  for (;;) {
    {
      // A downgrade builds and writes its backlog under down_mu, with a proof that has
      // not gone at its head (core/down.cpp): so the proof goes once, and first.
      std::lock_guard<Lock> d(link.down_mu);
      if (!link.proof_due.load()) return true;
      bool confirmed, failed;
      {
        std::lock_guard<Lock> lock(link.channel->mu());
        link.channel->progress_st();
        confirmed = link.channel->confirmed_st();
        failed = link.channel->failed() || link.tx_left.load();
      }
      if (failed) return false;  // going back to TCP: the backlog carries the proof
      if (confirmed && binding::room(fd)) {
        const size_t sent = binding::send_proof(fd, link.proof);
        if (sent == wire::kProofSize) {
          link.proof_due.store(false);
          stats::add(stats::g.bytes_tcp_sent, wire::kProofSize);
          link.proof_us.store(now_us(), std::memory_order_relaxed);
          return true;
        }
        if (sent > 0) {  // the socket broke in the middle of it: TCP says how it ends
          link.proof_due.store(false);
          std::lock_guard<Lock> lock(link.channel->mu());
          link.channel->fail_st("the TCP connection did not take the proof");
          return false;
        }
      }
    }
    if (now_us() >= until) return false;
    pollfd p{fd, POLLOUT, 0};
    real.poll(&p, 1, 10);
  }
}

void proof_retry_st(const std::weak_ptr<Link>& weak, int tries) noexcept {
  std::shared_ptr<Link> link = weak.lock();
  if (!link || !link->proof_due.load() || link->down.load()) return;
  SocketRef s = link->socket.lock();
  if (!s) return;
  bool done = false;
  {
    std::unique_lock<Lock> tx(s->tx_mu, std::try_to_lock);
    if (tx.owns_lock()) {
      // The program's socket, while the number is surely still its (upgrade's watch_mu);
      // once it closed it, closing() wrote the proof.
      std::lock_guard<Lock> w(link->watch_mu);
      done = link->unwatched || write_proof(link->fd, *link, false);
    }
  }
  if (done) return;
  // Every millisecond for 2 s, then every 50 ms; the client's patience ends it.
  const auto next = tries < 2000 ? std::chrono::milliseconds(1) : std::chrono::milliseconds(50);
  poller::at_st(poller::Clock::now() + next, [weak, tries] { proof_retry_st(weak, tries + 1); });
}

void cut_over_now(int fd, Socket& s, Link& link) noexcept {
  {
    std::unique_lock<Lock> tx(s.tx_mu, std::try_to_lock);
    if (tx.owns_lock() && !link.tx_cut && !link.down.load() && link.tcp_senders == 0 && link.established()) {
      cut_over(fd, s, link);
      return;
    }
  }
  poller::post([weak = std::weak_ptr<Link>(s.link)] {
    std::shared_ptr<Link> l = weak.lock();
    if (SocketRef again = l ? l->socket.lock() : nullptr; again && again->transport() == Transport::rdma)
      cut_over_soon(l, *again, 0);
  });
}

void cut_over_soon(const std::shared_ptr<Link>& link, Socket& s, int tries) noexcept {
  {
    std::unique_lock<Lock> tx(s.tx_mu, std::try_to_lock);
    if (tx.owns_lock()) {
      if (link->tx_cut || link->down.load()) return;
      if (link->client && link->fin_sent.load()) {
        // Its TCP side ended before the upgrade settled: no proof can follow, so this
        // side never cuts over. The RDMA side goes: the server, seeing it go, reads TCP
        // to its end (and this side reads the server's bytes from TCP, the server never
        // being bound).
        rdma_disconnect(link->channel->id());
        down::want(*link, down::Why::failed);
        return;
      }
      if (link->tcp_senders == 0) {
        // A server not bound yet cuts over once it is (look_for_proof, a receive).
        if (!link->client) {
          cut_over(-1, s, *link);
          return;
        }
        // The program's socket, while the number is surely still its (upgrade's watch_mu).
        std::lock_guard<Lock> w(link->watch_mu);
        if (!link->unwatched) cut_over(link->fd, s, *link);
        return;
      }
    }
  }
  // A send is in progress: its next one cuts over. A client tries again anyway (it may
  // never send again, and its proof is what binds the connection), as does a side whose
  // program already ended it on TCP (its cutover carries the end of the stream).
  if (!link->client && !link->fin_sent.load()) return;
  const auto next = tries < 2000 ? std::chrono::milliseconds(1) : std::chrono::milliseconds(50);
  poller::at_st(poller::Clock::now() + next, [link, tries] {
    if (SocketRef again = link->socket.lock(); again && again->transport() == Transport::rdma)
      cut_over_soon(link, *again, tries + 1);
  });
}

void look_for_proof(const std::shared_ptr<Link>& link) noexcept {
  if (link->client || !link->established() || link->down.load() || link->forged.load() || link->channel->trusted())
    return;
  SocketRef s = link->socket.lock();
  if (!s) return;
  binding::Verdict v = binding::Verdict::wait;
  int fd = -1;
  {
    std::unique_lock<Lock> rx(s->rx_mu, std::try_to_lock);
    if (!rx.owns_lock()) return;  // a receive is looking: it takes the proof itself
    std::lock_guard<Lock> w(link->watch_mu);
    if (link->unwatched) return;
    {
      std::lock_guard<Lock> lock(link->channel->mu());
      Channel& ch = *link->channel;
      ch.progress_st();
      if (!ch.peer_cutover_known() || link->tcp_received.load() < ch.peer_cutover()) return;
    }
    fd = link->fd;
    v = binding::look(fd, *link);
    if (v == binding::Verdict::proven) cut_over_now(fd, *s, *link);
  }
  if (v == binding::Verdict::refused) down::want(*link, down::Why::forged);
}

namespace {

// A send on a connection going back to TCP (core/down.h), past `sent` bytes: after
// the backlog, straight to the kernel.
long send_down(int fd, Socket& s, Link& link, const iovec* iov, int iovcnt, size_t total, int flags, bool nonblock,
               size_t sent, Deadline& deadline) {
  for (;;) {
    const uint32_t seen = link.signal.load();
    int err = 0;
    const down::Send how = down::look_tx(fd, link, err, true);
    down::finish_if_done(link);
    if (how == down::Send::dead) {
      if (err == 0 || err == EPIPE) return send_on_dead(fd, sent, flags);
      if (sent) return static_cast<long>(sent);
      down::error_taken(link);  // as the kernel's socket error: once, then EPIPE
      return -err;
    }
    if (how == down::Send::direct) {
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
  if ((flags & MSG_OOB) && link.established() && !link.inherited) hand_off(fd, s);
  size_t sent = 0;
  Deadline deadline;
  for (;;) {
    if (link.down.load(std::memory_order_relaxed) && !link.inherited)
      return send_down(fd, s, link, iov, iovcnt, total, flags, nonblock, sent, deadline);
    const uint32_t seen = link.signal.load();
    size_t k = 0;
    bool dead = false, read_past = false;
    down::Why why = down::Why::failed;
    {
      std::unique_lock<Lock> tx(s.tx_mu);
      bool by_tcp = !link.established() || s.transport() == Transport::kernel || (!link.tx_cut && link.tcp_senders > 0);
      if (!by_tcp && !link.tx_cut && !(flags & MSG_OOB) && !link.orphaned && !link.fin_sent && !link.tx_left.load()) {
        const Cut cut = cut_over(fd, s, link);
        if (cut == Cut::failed) {
          down::want(link, down::Why::failed);  // the channel failed: the stream goes on over TCP
          continue;
        }
        by_tcp = cut == Cut::later;
      }
      if (by_tcp) {
        ++link.tcp_senders;
        tx.unlock();
        Slice rest(iov, iovcnt, sent, total - sent, total);
        long r = send_tcp(fd, s, link, rest.v, rest.n, flags, sent);
        if (r < 0) return broken(sent, static_cast<int>(-r));
        sent += static_cast<size_t>(r);
        // A blocking kernel send returns short only when it was interrupted or timed
        // out; a part of a longer vector list that went whole is followed by the next.
        if (static_cast<size_t>(r) == rest.bytes && sent < total) continue;
        return static_cast<long>(sent);
      }
      if (flags & MSG_OOB) return broken(sent, EOPNOTSUPP);  // the hand-off failed
      if (link.orphaned || link.fin_sent) {
        tx.unlock();  // a SIGPIPE handler (the program's own) may send on it or close it
        return epipe(sent, flags);
      }
      if (link.tx_left.load()) continue;  // going back to TCP
      if (link.proof_due.load()) write_proof(fd, link, false);
      if (total == 0) return 0;
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      if (!ch.fits_st(total - sent)) ch.progress_st();
      dead = down::leaving_st(link, ch, why);
      read_past = ch.peer_cutover_known() && link.tcp_received.load() >= ch.peer_cutover();
      Slice rest(iov, iovcnt, sent, total - sent, total);
      k = dead ? 0 : ch.send_st(rest.v, rest.n, total - sent);
    }
    if (dead) {
      down::want(link, why);  // the stream goes on over TCP
      continue;
    }
    if (k == 0 && read_past && down::tcp_took_over(fd, link, why)) {
      down::want(link, down::confirmed(link, why));
      continue;
    }
    sent += k;
    stats::add(stats::g.bytes_rdma_sent, k);
    if (sent == total) return static_cast<long>(sent);
    if (nonblock) return broken(sent, EAGAIN);
    if (k > 0) continue;
    int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
    if (w < 0) return broken(sent, -w);
  }
}

namespace {

// Room in a pipe, in bytes: its capacity less what it holds. A pipe written by others
// meanwhile may have less; a write of this many then waits for the reader, as a
// splice into that pipe would.
long pipe_room(int pipe) {
  int size = real.fcntl(pipe, F_GETPIPE_SZ, 0);
  int held = 0;
  if (size < 0 || real.ioctl(pipe, FIONREAD, &held) != 0) return -errno;
  return size > held ? size - held : 0;
}

// Waits until the pipe is ready for `events` (POLLIN / POLLOUT); -EAGAIN if it is not
// and the caller must not wait, 0 once it is (or its other end is gone: POLLHUP/ERR).
long pipe_wait(int pipe, short events, bool nonblock) {
  pollfd p{pipe, events, 0};
  long r = api::sys(real.poll(&p, 1, nonblock ? 0 : -1));
  if (r < 0) return r;
  return r == 0 ? -EAGAIN : 0;
}

bool pipe_nonblocking(int pipe, unsigned flags) {
  return (flags & SPLICE_F_NONBLOCK) || (real.fcntl(pipe, F_GETFL, 0) & O_NONBLOCK);
}

}  // namespace

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
      int w = wait_for(link, seen, now_us() + static_cast<int64_t>(config().upgrade_timeout_ms) * 1000);
      if (w == -EAGAIN) return end_of_stream(0, "TCP ended and no cutover came");
      if (w < 0) return w;
      continue;
    }
    if (s.nonblocking.load()) return -EAGAIN;  // the socket's own flag decides, as the kernel's splice
    int w = wait_for(link, seen, deadline.of(s.rcvtimeo_us.load()));
    if (w < 0) return w;
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
    down::Why why = down::Why::failed;
    if (link.down.load()) {
      int err = 0;
      const down::Send how = down::look_tx(fd, link, err, true);
      if (how == down::Send::dead) return send_on_dead(fd, 0, 0);
      if (how == down::Send::direct) {
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
      bool by_tcp = !link.established() || s.transport() == Transport::kernel || (!link.tx_cut && link.tcp_senders > 0);
      if (!by_tcp && !link.tx_cut && !link.orphaned && !link.fin_sent) {
        const Cut cut = cut_over(fd, s, link);
        if (cut == Cut::failed) {
          down::want(link, down::Why::failed);
          continue;
        }
        by_tcp = cut == Cut::later;
      }
      if (by_tcp) {
        // TCP still carries this side's bytes: the kernel's splice, counted like a send.
        ++link.tcp_senders;
        tx.unlock();
        return tcp_send_done(s, link, api::sys(real.splice(pipe, nullptr, fd, nullptr, len, flags)));
      }
      if (link.orphaned || link.fin_sent) {
        tx.unlock();
        return epipe(0, 0);
      }
      std::lock_guard<Lock> lock(link.channel->mu());
      Channel& ch = *link.channel;
      if (ch.room_st() == 0) ch.progress_st();
      dead = down::leaving_st(link, ch, why);
      const size_t room = dead ? 0 : ch.room_st();
      if (room > 0) {
        // Only what the connection takes now leaves the pipe.
        const size_t n = std::min({len, static_cast<size_t>(held), room, kBounce});
        long r = api::sys(real.read(pipe, buf, n));
        if (r <= 0) return r;
        iovec v{buf, static_cast<size_t>(r)};
        const size_t k = ch.send_st(&v, 1, static_cast<size_t>(r));
        stats::add(stats::g.bytes_rdma_sent, k);
        return static_cast<long>(k);
      }
    }
    if (dead) {
      down::want(link, why);
      continue;
    }
    if (s.nonblocking.load()) return -EAGAIN;
    int w = wait_for(link, seen, deadline.of(s.sndtimeo_us.load()));
    if (w < 0) return w;
  }
}

long shutdown(int fd, Socket& s, int how) noexcept {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return -EINVAL;
  Link& link = *s.link;
  if (!link.established() || s.transport() == Transport::kernel) {
    std::unique_lock<Lock> tx(s.tx_mu, std::defer_lock);
    if (how != SHUT_RD) tx.lock();
    if (!link.tx_cut) {  // (not cut over meanwhile by an upgrade settling)
      if (how != SHUT_RD) {
        // TCP carries the fin: should the upgrade settle now, its cutover ends the
        // ring's stream at once (cut_over).
        link.fin_sent = true;
      }
      long r = api::sys(real.shutdown(fd, how));
      link.signal.bump();  // sleepers on the link look at the kernel socket again
      return r;
    }
  }
  if (how != SHUT_WR) {
    std::lock_guard<Lock> rx(s.rx_mu);
    link.rd_shut = true;
  }
  if (how != SHUT_RD && link.down.load()) {
    link.fin_sent = true;
    long r = down::shutdown_write(fd, link);
    link.signal.bump();
    return r;
  }
  if (how != SHUT_RD) {
    std::unique_lock<Lock> tx(s.tx_mu);
    if (!link.tx_cut && link.tcp_senders > 0) {
      // A thread sleeps in a kernel send that began before the cutover: the kernel's
      // shutdown ends it (as it would without ferry), and its count joins tcp_sent.
      real.shutdown(fd, SHUT_WR);
      while (link.tcp_senders > 0) {
        tx.unlock();
        sched_yield();
        tx.lock();
      }
    }
    end_send_side(fd, s, link, false);
  }
  link.signal.bump();
  return 0;
}

void abort_if_unread(int fd, Socket& s) noexcept {
  Link& link = *s.link;
  if (link.inherited || link.down.load() || s.transport() != Transport::rdma || !link.established()) return;
  {
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    ch.scan_st();
    if (ch.readable_st() == 0) return;
  }
  static const linger abort{1, 0};
  if (real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort) == 0) s.linger_s.store(0);
}

void end_send_side(int fd, Socket& s, Link& link, bool abortive) noexcept {
  const Cut cut = cut_over(fd, s, link);
  if (cut == Cut::later && !link.fin_sent && fd >= 0 && !abortive) {
    // Not cut over (yet): TCP carries the end of the stream, as every byte before it.
    link.fin_sent = true;
    real.shutdown(fd, SHUT_WR);
    return;
  }
  std::lock_guard<Lock> lock(link.channel->mu());
  if (abortive) {
    link.channel->abort_st();
  } else if (!link.fin_sent && cut == Cut::done) {
    link.channel->finish_st();
  }
  link.fin_sent = true;
}

long hand_off(int fd, Socket& s) noexcept {
  if (!s.link || s.link->inherited || s.transport() == Transport::kernel) return 0;
  if (upgrade::forgo(s)) return 0;  // never committed: TCP for good
  Link& link = *s.link;
  const int64_t settle = now_us() + (static_cast<int64_t>(config().upgrade_timeout_ms) + 1000) * 1000;
  // A handshake in flight settles first: once the peer cut over, only this side can
  // tell it where to resend from.
  while (link.phase.load() == Link::Phase::handshake && now_us() < settle) {
    const uint32_t seen = link.signal.load();
    if (link.phase.load() != Link::Phase::handshake) break;
    wait_for(link, seen, std::min<int64_t>(settle, now_us() + 10000));
  }
  if (s.transport() == Transport::kernel) return 0;
  if (!link.established()) return 0;  // still not settled: it never reached RDMA
  {
    std::lock_guard<Lock> rx(s.rx_mu);
    std::lock_guard<Lock> tx(s.tx_mu);
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    if (!link.down.load()) ch.progress_st();
    // Both directions ended: nothing is left to carry on over TCP.
    if (link.fin_sent.load() && ch.peer_fin()) return 0;
    down::Why why = down::Why::failed;
    const bool read_past = ch.peer_cutover_known() && link.tcp_received.load() >= ch.peer_cutover();
    if (link.down.load() || down::leaving_st(link, ch, why) || (read_past && down::tcp_took_over(fd, link, why)) ||
        !ch.hand_off_st()) {
      // Already going back (failed over, the peer went back or handed over first), or
      // no hand-off message can go: that going back finishes before the socket leaves
      // the program, nothing of it waiting for the program's next send.
      link.leaving.store(true);
      down::want(link, why);
    } else {
      link.handed_off.store(true);
      down::want(link, down::Why::handoff);
    }
    link.signal.bump();
  }
  // The backlog may wait for the peer's reader: as long as a blocked send would.
  const int64_t until = now_us() + 10 * 1000000;
  for (;;) {
    const uint32_t seen = link.signal.load();
    int err = 0;
    const down::Send how = down::look_tx(fd, link, err);
    (void)down::readable(fd, link);  // moves the receive side on
    down::finish_if_done(link);
    if (s.transport() == Transport::kernel) return 0;
    if (how == down::Send::dead) return -(err ? err : EPIPE);
    if (down::ended(link)) return 0;  // TCP ended before the peer's header: so it reads
    if (now_us() >= until) {
      FERRY_LOG(warn, "handoff", "fd %d: could not go back to TCP intact before leaving the program", fd);
      down::give_up(fd, link, "the hand-off did not finish");
      return -ETIMEDOUT;
    }
    wait_for(link, seen, until);
  }
}

void sndbuf_changed(Socket& s) noexcept {
  std::lock_guard<Lock> tx(s.tx_mu);
  if (!s.link || !s.link->tx_cut) return;  // the cutover reads it
  std::lock_guard<Lock> lock(s.link->channel->mu());
  s.link->channel->set_queue_limit_st(queue_limit(s, *s.link->channel));
}

namespace {
// The kernel socket's count (an ioctl) plus what the channel holds (count(channel)).
template <class Count>
long kernel_plus_channel(int fd, Socket& s, unsigned long request, Count count) {
  int tcp = 0;
  if (real.ioctl(fd, request, &tcp) != 0) return -errno;
  Link& link = *s.link;
  if (!link.established()) return tcp;
  std::lock_guard<Lock> lock(link.channel->mu());
  return tcp + static_cast<long>(count(*link.channel));
}
}  // namespace

long unsent(int fd, Socket& s) noexcept {
  if (s.link && s.link->down.load()) return down::unsent(fd, *s.link);
  return kernel_plus_channel(fd, s, SIOCOUTQ, [](Channel& ch) { return ch.unsent_st(); });
}

long readable(int fd, Socket& s) noexcept {
  if (s.link && s.link->down.load()) return down::readable(fd, *s.link);
  return kernel_plus_channel(fd, s, FIONREAD, [](Channel& ch) {
    ch.progress_st();
    return ch.readable_st();
  });
}

}  // namespace ferry::stream
