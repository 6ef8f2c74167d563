#include "core/conn/downgrade.h"
#include "core/base/contract.h"
#include "core/conn/downgrade_parts.h"

#include "core/base/fork_path.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"

#include <poll.h>
#include <sys/ioctl.h>

#include <mutex>

namespace ferry {

namespace {
FERRY_FORK_DATA constinit std::atomic<long> g_alive{0};  // read at every fork
}  // namespace

Link::Link() noexcept { g_alive.fetch_add(1, std::memory_order_relaxed); }

Link::~Link() {
  downgrade::close_dup(*this);
  g_alive.fetch_sub(1, std::memory_order_relaxed);
}

long Link::alive() noexcept { return g_alive.load(std::memory_order_acquire); }

void DownState::on_event_st(uint32_t) {
  FERRY_POLLER_ONLY();
  link->tcp_events.fetch_add(1, std::memory_order_relaxed);
  link->signal.bump();
  // The backlog moves on here too: the program may be busy elsewhere, or gone.
  std::unique_lock<Lock> lock(link->down_mu, std::try_to_lock);
  if (!lock.owns_lock() || tx != Tx::writing) return;
  int err = 0;
  lock.unlock();
  downgrade::look_tx(-1, *link, err);
}

namespace downgrade {
namespace {
constexpr uint32_t kWatch = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
}  // namespace

namespace parts {

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
void ensure(int fd, Link& link, bool verify) {
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
  FERRY_HELD(link.down_mu);
  link.tx_left.store(true);
  link.channel->leave_locked();
  stats::add(stats::g.downgrade_resets, 1);
  FERRY_LOG(info, "downgrade", "%s: reset", why);
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
  FERRY_HELD(link.down_mu);
  if (st.rx == DownState::Rx::ring && link.handed_off.load()) st.rx = DownState::Rx::plain;
}

bool done_locked(const DownState& st) {
  FERRY_HELD(st.link->down_mu);
  return st.tx == DownState::Tx::done && st.rx == DownState::Rx::plain;
}

}  // namespace parts

using namespace parts;

void want(Link& link, Why why) noexcept {
  if (!link.transition(ConnState::established, ConnState::downgrading)) {
#if FERRY_CHECKS
    if (!link.down()) contract_broken("a downgrade of a connection never established", __func__);
#endif
    return;  // going back already
  }
  std::atomic<uint64_t>* reason = &stats::g.upgrades_forged;  // counted by core/binding
  switch (why) {
    case Why::failed:
      if (link.client && link.channel && !link.channel->trusted()) {
        // Never bound (core/conn/binding.h): the server's answer to our proof will not
        // come now, whether it waited too long or its queue pair went first.
        reason = &stats::g.upgrades_unproven;
        FERRY_LOG(info, "downgrade", "connection goes back to TCP: its RDMA peer never answered our proof");
      } else {
        reason = &stats::g.downgrades_failover;
        FERRY_LOG(info, "downgrade", "connection goes back to TCP: its RDMA side failed");
      }
      break;
    case Why::peer:
      reason = &stats::g.downgrades_peer;
      FERRY_LOG(info, "downgrade", "connection goes back to TCP: the peer went back");
      break;
    case Why::handoff:
      reason = &stats::g.downgrades_handoff;
      FERRY_LOG(info, "downgrade", "connection goes back to TCP: handed over to another program");
      break;
    case Why::forged: break;
  }
  if (why != Why::forged) stats::add(*reason, 1);
  if (std::shared_ptr<Socket> s = link.socket.lock()) conn_report::why(s->report, *reason);
  link.signal.bump();
}

Why confirmed(Link& link, Why why) noexcept {
  if (why != Why::peer || !link.channel) return why;
  std::lock_guard<Lock> lock(link.channel->mu());
  link.channel->poll_all_locked();
  return link.channel->peer_handoff() ? Why::handoff : why;
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
      if (ch.readable_locked() > 0 || ch.peer_fin()) m |= kIn;
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

void finish_if_done(Link& link) noexcept {
  {
    std::lock_guard<Lock> lock(link.down_mu);
    if (!link.down_state || !done_locked(*link.down_state)) return;
  }
  if (link.transition(ConnState::downgrading, ConnState::downgraded))
    FERRY_LOG(debug, "downgrade", "connection is on kernel TCP again");
  close_dup(link);
  link.signal.bump();
}

bool ended(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  return link.down_state && link.down_state->rx == DownState::Rx::ended;
}

void prepare(int fd, Link& link) noexcept { ensure(fd, link); }

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

}  // namespace downgrade
}  // namespace ferry
