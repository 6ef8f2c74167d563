#include "core/conn/readiness.h"

#include "core/base/deferral.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/conn/downgrade.h"
#include "core/proto/wire.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace ferry::readiness {
namespace {

constexpr uint32_t kIn = EPOLLIN | EPOLLRDNORM;
constexpr uint32_t kOut = EPOLLOUT | EPOLLWRNORM;

// What the kernel socket says, for a connection whose RDMA side broke: the peer's
// orderly close or its reset reached TCP too.
uint32_t kernel_events(int fd) noexcept {
  pollfd p{fd, POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0};
  if (real.poll(&p, 1, 0) != 1) return 0;
  return static_cast<uint32_t>(p.revents) & (kIn | kOut | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI);
}

bool (*g_carried)(Socket&) noexcept = nullptr;

}  // namespace

void set_inherited_check(bool (*carried)(Socket& s) noexcept) noexcept { g_carried = carried; }

State of(int fd, Link& link) noexcept {
  State st;
  if (link.orphaned) {
    // Inherited from an ancestor that upgraded it: the owner hands it over first, or
    // it reports what a reset connection would.
    SocketRef s = link.socket.lock();
    if (s && g_carried && !g_carried(*s)) {
      st.events = kernel_events(fd);
      return st;
    }
    st.events = kIn | kOut | EPOLLRDHUP | EPOLLHUP | EPOLLERR;
    return st;
  }
  if (link.down(std::memory_order_relaxed)) return downgrade::state(fd, link);
  Channel& ch = *link.channel;
  size_t readable;
  uint64_t tcp_stream_left = UINT64_MAX;  // stream bytes the kernel socket may still hold
  bool proof_awaited = false;
  wire::Nonce nonce{};
  bool writable, fin, dead, tcp_pending, left_unread, handoff, half_full;
  {
    // Bytes land without completions: callers look first (drive(), prepare_sleep()).
    std::lock_guard<Lock> lock(ch.mu());
    // A peer that left: its end of stream, if it sent one, is known before deciding.
    if (link.peer_gone.load() && !ch.peer_fin()) ch.poll_all_locked();
    readable = ch.readable_locked();
    half_full = ch.rx_half_full_locked();
    writable = ch.writable_locked();
    fin = ch.peer_fin();
    dead = ch.failed();
    handoff = ch.peer_handoff();
    left_unread = ch.peer_left_unread_locked();
    // Until the client proved itself (core/conn/binding.h) the stream is TCP's: its proof, or
    // a forger's client's own bytes.
    const uint64_t tcp_received = link.tcp_received.load(std::memory_order_relaxed);
    tcp_pending = !ch.peer_cutover_known() || tcp_received < ch.peer_cutover() || !ch.trusted();
    // Past the peer's cutover point the kernel socket holds its proof, not the stream's
    // bytes: a receive takes the proof and finds nothing, and a program told "readable"
    // would block in it (iperf3's server did, its client waiting for it).
    if (ch.peer_cutover_known())
      tcp_stream_left = ch.peer_cutover() > tcp_received ? ch.peer_cutover() - tcp_received : 0;
    // Before the cutover point is known, a proof at the head of the kernel's bytes
    // means the same: nothing of the stream is there.
    proof_awaited = !link.client && !ch.trusted() && !ch.peer_cutover_known();
    if (proof_awaited) nonce = ch.nonce();
    // Bytes the peer sent before its cutover arrive on TCP: an edge too.
    st.rx_events = ch.rx_events_locked() + link.tcp_events.load(std::memory_order_relaxed);
    st.tx_events = ch.tx_events_locked();
  }
  dead = dead || link.peer_gone.load();
  if (handoff) {
    downgrade::want(link, downgrade::Why::handoff);  // the peer reads TCP only from now on
    return downgrade::state(fd, link);
  }
  if (dead && !fin) {
    downgrade::want(link, downgrade::Why::failed);  // the stream goes on over TCP
    return downgrade::state(fd, link);
  }
  downgrade::Why why = downgrade::Why::peer;
  if (!tcp_pending && readable == 0 && !fin && downgrade::tcp_took_over(fd, link, why)) {
    downgrade::want(link, downgrade::confirmed(link, why));
    return downgrade::state(fd, link);
  }
  const bool rd_shut = link.rd_shut.load() || fin;
  const bool wr_shut = link.fin_sent.load();
  uint32_t m = 0;
  // Readable as the kernel's TCP counts it: SO_RCVLOWAT bytes (the peer's bytes before
  // its cutover and the ring's together), or a receive queue that cannot take much more.
  size_t unread = readable;
  if (tcp_pending) {
    int n = 0;
    if (real.ioctl(fd, FIONREAD, &n) == 0 && n > 0 && proof_awaited) {
      uint8_t proof[wire::kProofSize], head[wire::kProofKnown];
      wire::encode(wire::Proof{nonce, 0}, proof);
      const ssize_t k = real.recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
      if (k > 0 && std::memcmp(head, proof, static_cast<size_t>(k)) == 0) n = 0;
    }
    if (n > 0) unread += static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(n), tcp_stream_left));
  }
  if (unread > 0 && (unread >= static_cast<size_t>(link.rcvlowat.load(std::memory_order_relaxed)) || half_full)) m |= kIn;
  if (rd_shut) m |= kIn | EPOLLRDHUP;
  if (dead && !fin) {
    // Whatever the kernel says decides between an orderly end and a reset (and a peer
    // that left bytes unread is a reset, see stream's tcp_verdict); the ring cannot
    // take more bytes either way.
    m |= kernel_events(fd) & ~kOut;
    if (left_unread && (m & EPOLLRDHUP)) m |= kIn | EPOLLHUP | EPOLLERR;
    m |= kOut;  // a send reports the error
  } else if (wr_shut || writable) {
    m |= kOut;
  }
  if (rd_shut && wr_shut) m |= EPOLLHUP;
  st.events = m;
  return st;
}

bool drive(Link& link, bool first) noexcept {
  if (!link.established() || link.inherited) return false;
  if (first) {
    std::lock_guard<Lock> lock(link.channel->mu());
    return link.channel->poll_all_locked();
  }
  std::unique_lock<Lock> lock(link.channel->mu(), std::try_to_lock);
  return lock.owns_lock() && link.channel->poll_spinning_locked();
}

void prepare_sleep(Link& link) noexcept {
  if (!link.established() || link.inherited) return;
  std::lock_guard<Lock> lock(link.channel->mu());
  link.channel->prepare_sleep_locked();
}

Kicker::~Kicker() {
  if (fd_.load() < 0) return;
  int fd = own::release(fd_);
  real.close(fd);
}

bool Kicker::open() noexcept {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return false;
  fd_.store(own::adopt(fd, [this](int, int to) { move(to); }));
  return true;
}

void Kicker::move(int to) noexcept {
  fd_.store(to);
  while (users_.load() > 0) sched_yield();
}

void Kicker::kick() noexcept {
  if (armed_.load(std::memory_order_seq_cst) <= 0 || fd_.load(std::memory_order_relaxed) < 0) return;
  if (pending_.exchange(true, std::memory_order_seq_cst)) return;
  uint64_t one = 1;
  deferral::Stretch stretch;  // a handler jumping out here would leave users_ up (move)
  users_.fetch_add(1);
  (void)!real.write(fd_.load(), &one, sizeof one);
  users_.fetch_sub(1);
}

void Kicker::drain() noexcept {
  uint64_t v;
  deferral::Stretch stretch;
  users_.fetch_add(1);
  (void)!real.read(fd_.load(), &v, sizeof v);
  users_.fetch_sub(1);
  pending_.store(false, std::memory_order_seq_cst);
}

void Kicker::after_fork_child(int arms) noexcept {
  users_.store(0);
  armed_.store(arms);
}

}  // namespace ferry::readiness
