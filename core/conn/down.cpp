#include "core/conn/down.h"

#include "core/conn/binding.h"

#include "core/base/fork_path.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"

#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <mutex>

namespace ferry {

namespace {
FERRY_FORK_DATA constinit std::atomic<long> g_alive{0};  // read at every fork
}  // namespace

Link::Link() noexcept { g_alive.fetch_add(1, std::memory_order_relaxed); }

Link::~Link() {
  down::close_dup(*this);
  g_alive.fetch_sub(1, std::memory_order_relaxed);
}

long Link::alive() noexcept { return g_alive.load(std::memory_order_acquire); }

void DownState::on_event_st(uint32_t) {
  link->tcp_events.fetch_add(1, std::memory_order_relaxed);
  link->signal.bump();
  // The backlog moves on here too: the program may be busy elsewhere, or gone.
  std::unique_lock<Lock> lock(link->down_mu, std::try_to_lock);
  if (!lock.owns_lock() || tx != Tx::writing) return;
  int err = 0;
  lock.unlock();
  down::look_tx(-1, *link, err);
}

namespace down {
namespace {

constexpr uint32_t kIn = EPOLLIN | EPOLLRDNORM;
constexpr uint32_t kOut = EPOLLOUT | EPOLLWRNORM;
constexpr uint32_t kWatch = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

// Resets the TCP connection: what the peer (and the program) get when the stream
// cannot go on intact. A connect() to AF_UNSPEC aborts a TCP socket with a reset.
void reset(int fd) {
  sockaddr sa{};
  sa.sa_family = AF_UNSPEC;
  real.connect(fd, &sa, sizeof sa);
}

// Whether the peer's TCP side has ended or failed, with nothing more to read: its
// process is gone (a live peer going back to TCP writes its header first).
bool tcp_over(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (real.poll(&p, 1, 0) != 1) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  int n = 0;
  return (p.revents & POLLRDHUP) && real.ioctl(fd, FIONREAD, &n) == 0 && n == 0;
}

// Makes link.down_state, with ferry's own duplicate of fd, if it is not there yet.
// `verify`: fd may no longer be this connection's (a readiness look's registration);
// otherwise it is the descriptor of the program's call. No lock held: registering a
// descriptor of ferry's may wait for a move of another.
void ensure(int fd, Link& link, bool verify = false) {
  {
    std::lock_guard<Lock> lock(link.down_mu);
    if (link.down_state) return;
  }
  auto st = std::make_unique<DownState>();
  st->link = &link;
  DownState* raw = st.get();
  SocketRef s = fd >= 0 && verify ? fd_table().get(fd) : nullptr;
  if (fd >= 0 && (!verify || (s && s->link.get() == &link))) {
    int d = real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d >= 0) {
      d = own::adopt(d, [raw, &link](int from, int to) {
        std::lock_guard<Lock> lock(link.down_mu);
        poller::unwatch(from);
        raw->fd.store(to);
        poller::watch(to, kWatch, raw);
      });
      raw->fd.store(d);
    }
  }
  bool lost = false;
  {
    std::lock_guard<Lock> lock(link.down_mu);
    if (link.down_state) {
      lost = true;
    } else {
      if (raw->fd.load() >= 0) poller::watch(raw->fd.load(), kWatch, raw);
      link.down_state = std::move(st);
    }
  }
  if (lost && raw->fd.load() >= 0) real.close(own::release(raw->fd));
}

// The connection cannot go on intact: TCP is reset, and both directions say so.
// Needs down_mu and the channel's lock.
void reset_locked(Link& link, DownState& st, int fd, const char* why) {
  link.tx_left.store(true);
  link.channel->leave_st();
  stats::add(stats::g.downgrade_resets, 1);
  FERRY_LOG(info, "down", "%s: reset", why);
  if (fd >= 0) reset(fd);
  std::vector<uint8_t>().swap(st.backlog);
  st.tx = DownState::Tx::broken;
  st.tx_error = ECONNRESET;
  st.rx = DownState::Rx::ended;
  st.verdict = -ECONNRESET;
}

// We handed the connection to TCP: the peer resends from exactly where we stopped
// reading the ring, with no header, so TCP's bytes are the program's from here on.
void settle_rx_locked(Link& link, DownState& st) {
  if (st.rx == DownState::Rx::ring && link.handed_off.load()) st.rx = DownState::Rx::plain;
}

// Builds the send side's backlog once the peer has confirmed our cutover (and, for a
// hand-off of ours, our hand-off message). Needs down_mu.
void build_tx_locked(Link& link, DownState& st) {
  settle_rx_locked(link, st);
  if (st.tx != DownState::Tx::waiting) return;
  Channel& ch = *link.channel;
  std::lock_guard<Lock> lock(ch.mu());
  ch.progress_st();  // credits and confirmations that came meanwhile
  const int fd = st.fd.load();
  if (!link.tx_cut) {
    // Nothing of ours went into the ring: TCP simply goes on.
    link.tx_left.store(true);
    st.tx = DownState::Tx::done;
    return;
  }
  // The peer handed the connection over: whoever reads TCP next may not be ferry, so
  // the bytes resume exactly past what the peer read from its ring, with no header.
  const bool headerless = ch.peer_handoff();
  if (!headerless) {
    // Our header must not reach the peer before it knows where our ring's bytes begin,
    // nor, for a hand-off of ours, before our hand-off message (it decides the peer's
    // own resend).
    if (!ch.confirmed_st() || (link.handed_off.load() && !ch.handed_off_st())) {
      if (!ch.failed()) return;  // the completion will come
      // The peer may or may not know where our ring bytes begin: no stream it could
      // read is sure to be right, so the connection resets rather than guess.
      reset_locked(link, st, fd, "the RDMA side failed before the peer confirmed our messages");
      return;
    }
  }
  if (fd < 0) {
    // Nothing is left to write through.
    link.tx_left.store(true);
    ch.leave_st();
    st.tx = DownState::Tx::broken;
    return;
  }
  if (tcp_over(fd)) {
    // The peer's process is gone: there is nobody to resend to, and sends go to the
    // kernel socket as it stands, which answers as kernel TCP would after the peer
    // closed (the first send taken, the peer's reset, then EPIPE). A header written
    // now would take that first send's place.
    link.tx_left.store(true);
    // But bytes of ours that reached the peer after its fin, never read, are that
    // first send: kernel TCP's peer answered them with its reset, and a connection
    // that had seen the fin reports EPIPE from then on.
    const bool answered = ch.peer_fin() && ch.peer_left_unread_st();
    ch.leave_st();
    st.tx = answered ? DownState::Tx::broken : DownState::Tx::done;
    if (answered) st.tx_error = EPIPE;
    return;
  }
  const size_t head = headerless ? 0 : downgrade::kHeaderSize;
  st.backlog.resize(head);
  const int64_t resent = ch.take_unacked_st(st.backlog);
  link.tx_left.store(true);
  if (resent < 0) {
    reset_locked(link, st, fd, "the staging area does not hold the unconfirmed records");
    return;
  }
  // Stream offset of the first resent byte, in ring payload bytes and overall.
  const uint64_t from_ring = ch.payload_written_st() - static_cast<uint64_t>(resent);
  if (headerless) {
    uint64_t skip = 0;
    if (!downgrade::skip_to(from_ring, ch.peer_handoff_read(), static_cast<uint64_t>(resent), skip)) {
      reset_locked(link, st, fd, "the peer's hand-off names bytes it was never credited for");
      return;
    }
    st.backlog.erase(st.backlog.begin(), st.backlog.begin() + static_cast<std::ptrdiff_t>(skip));
  } else {
    downgrade::encode(downgrade::Header{link.tcp_sent + from_ring}, st.backlog.data());
  }
  stats::add(stats::g.bytes_resent, st.backlog.size() - head);
  st.at = 0;
  st.fin = link.fin_sent.load();
  st.lazy = head > 0 && st.backlog.size() == head;
  // A client's proof that never went (core/conn/binding.h) goes first: the server reads it
  // at our cutover point, before anything else of ours there.
  if (head > 0 && link.proof_due.exchange(false)) {
    uint8_t proof[wire::kProofSize];
    wire::encode(link.proof, proof);
    st.backlog.insert(st.backlog.begin(), proof, proof + sizeof proof);
    st.lazy = false;
  }
  st.tx = DownState::Tx::writing;
}

// Whether the backlog waits for the program: a header alone, with no fin or hand-off
// that needs it out.
bool waits_for_program(const Link& link, const DownState& st) {
  return st.lazy && !st.fin && !link.handed_off.load() && !link.leaving.load();
}

// Writes what the kernel takes of the backlog, through ferry's duplicate. Needs down_mu.
void pump_locked(Link& link, DownState& st) {
  if (st.tx != DownState::Tx::writing || st.fd_closing || waits_for_program(link, st)) return;
  const int fd = st.fd.load();
  while (st.at < st.backlog.size()) {
    const ssize_t r = real.send(fd, st.backlog.data() + st.at, st.backlog.size() - st.at, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      st.at += static_cast<size_t>(r);
      stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    st.tx = DownState::Tx::broken;
    st.tx_error = r < 0 ? errno : EPIPE;
    std::vector<uint8_t>().swap(st.backlog);
    link.signal.bump();
    return;
  }
  std::vector<uint8_t>().swap(st.backlog);
  st.tx = DownState::Tx::done;
  if (st.fin) real.shutdown(fd, SHUT_WR);
  link.signal.bump();
}

// The end of TCP before the peer's header: its process is gone. As kernel TCP would
// have it, an orderly end unless the peer left bytes of ours unread (a reset).
long verdict(Link& link) {
  std::lock_guard<Lock> lock(link.channel->mu());
  return link.channel->peer_left_unread_st() ? -ECONNRESET : 0;
}

// Whether the peer's header waits on TCP, past every byte TCP carried before its
// cutover: the peer is alive and resends from its last credited byte.
bool header_waits(int fd, const Link& link, const Channel& ch) {
  int n = 0;
  return fd >= 0 && link.tcp_received.load() >= ch.peer_cutover() && real.ioctl(fd, FIONREAD, &n) == 0 &&
         static_cast<size_t>(n) >= downgrade::kHeaderSize;
}

// Moves the receive side on without taking the program's bytes: from the ring to the
// header once the ring is empty (or, when the program passes the connection on, once
// the header waits: the ring's unread bytes come again behind it), and through the
// header and the overlap. Needs down_mu (and the socket's rx_mu, or the knowledge that
// no receive runs: a try).
void advance_rx_locked(int fd, Link& link, DownState& st) {
  settle_rx_locked(link, st);
  if (st.rx == DownState::Rx::ring) {
    Channel& ch = *link.channel;
    bool prove = false;
    {
      std::lock_guard<Lock> lock(ch.mu());
      ch.progress_st();
      // A server whose client has not proven itself yet (core/conn/binding.h): the proof
      // comes first at the cutover point, and with no proof there TCP is the stream.
      if (ch.peer_cutover_known() && !ch.trusted() && !link.client &&
          link.tcp_received.load() >= ch.peer_cutover()) {
        if (link.forged.load()) {
          st.rx = DownState::Rx::plain;
        } else {
          prove = true;
        }
      }
    }
    if (prove) {
      switch (binding::look(fd, link)) {
        case binding::Verdict::wait: return;
        case binding::Verdict::refused: st.rx = DownState::Rx::plain; return;
        case binding::Verdict::proven: return advance_rx_locked(fd, link, st);
      }
    }
    if (st.rx != DownState::Rx::ring) return;
    std::lock_guard<Lock> lock(ch.mu());
    if (!ch.peer_cutover_known()) {
      st.rx = DownState::Rx::plain;  // the peer never left TCP: no header comes
    } else if ((link.tcp_received.load() >= ch.peer_cutover() && ch.readable_st() == 0 && !ch.scan_st() &&
                !ch.peer_fin()) ||
               (link.leaving.load() && header_waits(fd, link, ch))) {
      st.resume = downgrade::Resume(ch.peer_cutover() + ch.payload_read_st(), ch.ring_size());
      st.rx = DownState::Rx::resume;
    }
  }
  while (st.rx == DownState::Rx::resume) {
    uint8_t buf[4096];
    const size_t want = static_cast<size_t>(std::min<uint64_t>(st.resume.needs(), sizeof buf));
    const ssize_t r = real.recv(fd, buf, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    if (r <= 0) {
      st.rx = DownState::Rx::ended;
      st.verdict = r < 0 ? -errno : (st.resume.header_read() ? -ECONNRESET : verdict(link));
      return;
    }
    stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
    size_t used = 0;
    switch (st.resume.take(buf, static_cast<size_t>(r), used)) {
      case downgrade::Resume::Step::more: break;
      case downgrade::Resume::Step::done: st.rx = DownState::Rx::plain; break;
      case downgrade::Resume::Step::broken:
        stats::add(stats::g.downgrade_resets, 1);
        FERRY_LOG(info, "down", "the peer's stream does not resume where ours stopped: reset");
        reset(fd);
        st.rx = DownState::Rx::ended;
        st.verdict = -ECONNRESET;
        break;
    }
  }
}

bool done_locked(const DownState& st) {
  return st.tx == DownState::Tx::done && st.rx == DownState::Rx::plain;
}

}  // namespace

void want(Link& link, Why why) noexcept {
  if (link.down.exchange(true)) return;
  switch (why) {
    case Why::failed:
      stats::add(stats::g.downgrades_failover, 1);
      FERRY_LOG(info, "down", "connection goes back to TCP: its RDMA side failed");
      break;
    case Why::peer:
      stats::add(stats::g.downgrades_peer, 1);
      FERRY_LOG(info, "down", "connection goes back to TCP: the peer went back");
      break;
    case Why::handoff:
      stats::add(stats::g.downgrades_handoff, 1);
      FERRY_LOG(info, "down", "connection goes back to TCP: handed over to another program");
      break;
    case Why::forged: break;  // counted by core/binding
  }
  link.signal.bump();
}

Why confirmed(Link& link, Why why) noexcept {
  if (why != Why::peer || !link.channel) return why;
  std::lock_guard<Lock> lock(link.channel->mu());
  link.channel->progress_st();
  return link.channel->peer_handoff() ? Why::handoff : why;
}

bool tcp_took_over(int fd, Link& link, Why& why) noexcept {
  const uint32_t ev = link.tcp_events.load(std::memory_order_relaxed);
  if (ev == link.tcp_checked.load(std::memory_order_relaxed)) return false;
  link.tcp_checked.store(ev, std::memory_order_relaxed);
  // After the cutover nothing of ours ends the kernel's connection in error: one that
  // did is TCP's own verdict (keepalive, user timeout, a reset). A hang-up alone is
  // not: both directions shut in order (our shutdown went to the kernel before the
  // upgrade, then the peer's close) leaves the ring's bytes still to come.
  pollfd p{fd, POLLIN, 0};
  if (real.poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE) {
      why = Why::failed;
      return true;
    }
  }
  int n = 0;
  why = Why::peer;
  return real.ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

long look_rx(int fd, Link& link, const iovec* iov, int iovcnt, int flags) noexcept {
  ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  pump_locked(link, st);
  const bool peek = flags & MSG_PEEK;
  if (st.rx == DownState::Rx::ring) {
    Channel& ch = *link.channel;
    size_t n = 0;
    bool from_tcp = false;
    uint64_t left = 0;
    {
      std::lock_guard<Lock> chl(ch.mu());
      ch.progress_st();
      if (ch.peer_cutover_known()) {
        const uint64_t got = link.tcp_received.load();
        if (got < ch.peer_cutover()) {
          from_tcp = true;
          left = ch.peer_cutover() - got;
        } else {
          n = ch.recv_st(iov, iovcnt, peek);
          if (n == 0 && ch.peer_fin()) return 0;  // every byte came through the ring
        }
      }
    }
    if (n > 0) {
      if (!peek) stats::add(stats::g.bytes_rdma_received, n);
      return static_cast<long>(n);
    }
    if (from_tcp) {
      // Bytes the peer sent on TCP before its cutover.
      iovec part[64];
      int k = 0;
      for (int i = 0; i < iovcnt && k < 64 && left > 0; ++i) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(iov[i].iov_len, left));
        if (take == 0) continue;
        part[k++] = {iov[i].iov_base, take};
        left -= take;
      }
      msghdr m{};
      m.msg_iov = part;
      m.msg_iovlen = static_cast<size_t>(k);
      const long r = real.recvmsg(fd, &m, (flags & MSG_PEEK) | MSG_DONTWAIT);
      if (r > 0) {
        if (!peek) {
          link.tcp_received += static_cast<uint64_t>(r);
          stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
        }
        return r;
      }
      if (r == 0) return -ECONNRESET;  // TCP ended short of the cutover point
      return errno == EAGAIN ? kNothing : -errno;
    }
  }
  advance_rx_locked(fd, link, st);
  switch (st.rx) {
    case DownState::Rx::ring:
    case DownState::Rx::resume: return kNothing;
    case DownState::Rx::ended: {
      // A reset is reported once, then the end of the stream, as the kernel does.
      const long v = st.verdict;
      if (!peek) st.verdict = 0;
      return v;
    }
    case DownState::Rx::plain: break;
  }
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  const long r = real.recvmsg(fd, &m, flags | MSG_DONTWAIT);
  if (r > 0 && !peek) stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
  if (r >= 0) return r;
  return errno == EAGAIN ? kNothing : -errno;
}

Send look_tx(int fd, Link& link, int& err, bool sending) noexcept {
  if (fd >= 0) ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return Send::wait;
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  if (sending) st.lazy = false;
  pump_locked(link, st);
  switch (st.tx) {
    case DownState::Tx::waiting:
    case DownState::Tx::writing: return Send::wait;
    case DownState::Tx::done: return Send::direct;
    case DownState::Tx::broken: err = st.tx_error; return Send::dead;
  }
  return Send::dead;
}

void error_taken(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  if (link.down_state) link.down_state->tx_error = 0;
}

void give_up(int fd, Link& link, const char* why) noexcept {
  ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  if (st.tx == DownState::Tx::broken) return;
  std::lock_guard<Lock> chl(link.channel->mu());
  reset_locked(link, st, fd, why);
  link.signal.bump();
}

long shutdown_write(int fd, Link& link) noexcept {
  ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  if (st.tx == DownState::Tx::done) return real.shutdown(fd, SHUT_WR) == 0 ? 0 : -errno;
  st.fin = true;  // after the backlog (or never, for a connection that cannot go on)
  pump_locked(link, st);
  return 0;
}

readiness::State state(int fd, Link& link) noexcept {
  ensure(fd, link, true);
  readiness::State out;
  out.rx_events = out.tx_events = link.tcp_events.load(std::memory_order_relaxed);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  pump_locked(link, st);
  advance_rx_locked(fd, link, st);
  pollfd p{fd, POLLIN | POLLOUT | POLLRDHUP, 0};
  const uint32_t k = real.poll(&p, 1, 0) == 1 ? static_cast<uint32_t>(p.revents) : 0;
  uint32_t m = 0;
  switch (st.rx) {
    case DownState::Rx::ring: {
      Channel& ch = *link.channel;
      std::lock_guard<Lock> chl(ch.mu());
      if (ch.readable_st() > 0 || ch.peer_fin()) m |= kIn;
      int n = 0;
      if (link.tcp_received.load() < ch.peer_cutover() && real.ioctl(fd, FIONREAD, &n) == 0 && n > 0) m |= kIn;
      if (ch.peer_fin()) m |= EPOLLRDHUP;
      break;
    }
    case DownState::Rx::resume: break;
    case DownState::Rx::plain: m |= k & (kIn | EPOLLRDHUP | EPOLLHUP | EPOLLERR); break;
    case DownState::Rx::ended:
      m |= kIn | EPOLLRDHUP;
      if (st.verdict < 0) m |= EPOLLHUP | EPOLLERR;
      break;
  }
  // The peer's end or reset, as the kernel reports it (a peer whose process died).
  m |= k & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (link.rd_shut.load()) m |= kIn | EPOLLRDHUP;
  switch (st.tx) {
    case DownState::Tx::waiting: break;
    case DownState::Tx::writing:
      if (waits_for_program(link, st)) m |= k & (kOut | EPOLLHUP | EPOLLERR);
      break;
    case DownState::Tx::done: m |= k & (kOut | EPOLLHUP | EPOLLERR); break;
    case DownState::Tx::broken: m |= kOut; break;
  }
  out.events = m;
  return out;
}

long readable(int fd, Link& link) noexcept {
  ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  advance_rx_locked(fd, link, st);
  int n = 0;
  if (st.rx == DownState::Rx::resume || st.rx == DownState::Rx::ended) return 0;
  if (real.ioctl(fd, FIONREAD, &n) != 0) return -errno;
  if (st.rx == DownState::Rx::plain) return n;
  Channel& ch = *link.channel;
  std::lock_guard<Lock> chl(ch.mu());
  if (!ch.peer_cutover_known()) return n;
  const uint64_t pre = ch.peer_cutover() - std::min<uint64_t>(link.tcp_received.load(), ch.peer_cutover());
  return static_cast<long>(std::min<uint64_t>(pre, static_cast<uint64_t>(n)) + ch.readable_st());
}

long unsent(int fd, Link& link) noexcept {
  int n = 0;
  if (real.ioctl(fd, SIOCOUTQ, &n) != 0) return -errno;
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return n;
  const DownState& st = *link.down_state;
  // A header alone that waits for the program's next send is not the program's bytes:
  // a program that waits for its queue to empty must see it empty.
  if (st.tx != DownState::Tx::writing || waits_for_program(link, st)) return n;
  return n + static_cast<long>(st.backlog.size() - st.at);
}

void finish_if_done(Link& link) noexcept {
  {
    std::lock_guard<Lock> lock(link.down_mu);
    if (!link.down_state || !done_locked(*link.down_state)) return;
  }
  SocketRef s = link.socket.lock();
  if (s && s->transition(Transport::rdma, Transport::kernel))
    FERRY_LOG(debug, "down", "connection is on kernel TCP again");
  close_dup(link);
  link.signal.bump();
}

bool ended(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  return link.down_state && link.down_state->rx == DownState::Rx::ended;
}

void prepare(int fd, Link& link) noexcept { ensure(fd, link); }

void released(Link& link) noexcept {
  // Passed on (core/conn/handoff.h): another process may hold the socket, and TCP's end is
  // the kernel's, when the last descriptor of it closes (ferry's duplicate, once the
  // backlog is out, among them). A shutdown here would end the stream under it.
  if (link.handed_off.load() || link.leaving.load()) return;
  link.fin_sent.store(true);
  std::lock_guard<Lock> lock(link.down_mu);
  if (link.down_state) link.down_state->fin = true;
}

bool flushed(Link& link) noexcept {
  int err = 0;
  if (look_tx(-1, link, err) != Send::wait) return true;
  std::lock_guard<Lock> lock(link.down_mu);
  // Without ferry's duplicate nothing more can be written.
  return !link.down_state || link.down_state->fd.load() < 0;
}

bool backlog_waits(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return false;
  const DownState& st = *link.down_state;
  return st.tx == DownState::Tx::writing && !st.lazy && st.fd.load() >= 0;
}

void close_dup(Link& link) noexcept {
  DownState* st = nullptr;
  {
    std::lock_guard<Lock> lock(link.down_mu);
    if (!link.down_state || link.down_state->fd_closing || link.down_state->fd.load() < 0) return;
    st = link.down_state.get();
    st->fd_closing = true;
    poller::unwatch(st->fd.load());
  }
  const int fd = own::release(st->fd);
  real.close(fd);
  std::lock_guard<Lock> lock(link.down_mu);
  st->fd.store(-1);
}

}  // namespace down
}  // namespace ferry
