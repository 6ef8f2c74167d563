// Going back to TCP, the receiving side (core/conn/downgrade.h): the ring's last bytes, the
// peer's header and the overlap it resends, then TCP as it is.
#include "core/conn/downgrade.h"
#include "core/base/contract.h"
#include "core/conn/downgrade_parts.h"

#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <mutex>

namespace ferry::downgrade {
namespace {

// The end of TCP before the peer's header: its process is gone. As kernel TCP would
// have it, an orderly end unless the peer left bytes of ours unread (a reset).
long verdict(Link& link) {
  std::lock_guard<Lock> lock(link.channel->mu());
  return link.channel->peer_left_unread_locked() ? -ECONNRESET : 0;
}

// Whether the peer's header waits on TCP, past every byte TCP carried before its
// cutover: the peer is alive and resends from its last credited byte.
bool header_waits(int fd, const Link& link, const Channel& ch) {
  int n = 0;
  return fd >= 0 && link.tcp_received.load() >= ch.peer_cutover() && real.ioctl(fd, FIONREAD, &n) == 0 &&
         static_cast<size_t>(n) >= tcp_resume::kHeaderSize;
}

}  // namespace

namespace parts {

// Moves the receive side on without taking the program's bytes: from the ring to the
// header once the ring is empty (or, when the program passes the connection on, once
// the header waits: the ring's unread bytes come again behind it), and through the
// header and the overlap. Needs down_mu (and the socket's rx_mu, or the knowledge that
// no receive runs: a try).
void advance_rx_locked(int fd, Link& link, DownState& st) {
  FERRY_HELD(link.down_mu);
  settle_rx_locked(link, st);
  if (st.rx == DownState::Rx::ring) {
    Channel& ch = *link.channel;
    bool prove = false;
    {
      std::lock_guard<Lock> lock(ch.mu());
      ch.poll_all_locked();
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
    } else if ((link.tcp_received.load() >= ch.peer_cutover() && ch.readable_locked() == 0 && !ch.poll_ring_locked() &&
                !ch.peer_fin()) ||
               (link.leaving.load() && header_waits(fd, link, ch))) {
      st.resume = tcp_resume::Resume(ch.peer_cutover() + ch.payload_read_locked(), ch.ring_size());
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
      case tcp_resume::Resume::Step::more: break;
      case tcp_resume::Resume::Step::done: st.rx = DownState::Rx::plain; break;
      case tcp_resume::Resume::Step::broken:
        stats::add(stats::g.downgrade_resets, 1);
        FERRY_LOG(info, "downgrade", "the peer's stream does not resume where ours stopped: reset");
        reset(fd);
        st.rx = DownState::Rx::ended;
        st.verdict = -ECONNRESET;
        break;
    }
  }
}

}  // namespace parts

using namespace parts;

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
      ch.poll_all_locked();
      if (ch.peer_cutover_known()) {
        const uint64_t got = link.tcp_received.load();
        if (got < ch.peer_cutover()) {
          from_tcp = true;
          left = ch.peer_cutover() - got;
        } else {
          n = ch.recv_locked(iov, iovcnt, peek);
          if (n == 0 && ch.peer_fin()) return 0;  // every byte came through the ring
        }
      }
    }
    if (n > 0) {
      if (!peek) {
        stats::add(stats::g.bytes_rdma_received, n);
        conn_report::received(link.report, n);
      }
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
  return static_cast<long>(std::min<uint64_t>(pre, static_cast<uint64_t>(n)) + ch.readable_locked());
}

}  // namespace ferry::downgrade
