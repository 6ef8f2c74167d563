#include "core/conn/send_side.h"

#include "core/base/config.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/base/wait.h"
#include "core/conn/binding.h"
#include "core/conn/channel.h"
#include "core/conn/downgrade.h"
#include "core/conn/poller.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <mutex>

namespace ferry::send_side {
namespace {

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
  return send_queue_limit(static_cast<uint64_t>(s.sndbuf.load()), wmem, rmem, ch.peer_ring_locked());
}

}  // namespace

// The poller's retries of a client's proof that could not go at its cutover.
void proof_retry_st(const std::weak_ptr<Link>& weak, int tries) noexcept;

Cut cut_over(int fd, Socket& s, Link& link) noexcept {
  if (link.tx_cut) return Cut::done;
  // The client proves it holds the TCP connection right at its cutover point
  // (core/conn/binding.h): only while its TCP side can still carry the proof.
  if (link.client && (fd < 0 || link.fin_sent.load())) return Cut::later;
  {
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    if (link.tx_left.load() || link.handed_off.load()) return Cut::failed;  // going back to TCP: the ring takes nothing
    if (ch.peer_handoff()) {
      // The peer reads TCP only from now on: this side never cuts over.
      downgrade::want(link, downgrade::Why::handoff);
      return Cut::failed;
    }
    // The server's bytes go by TCP until the client has proven itself.
    if (!link.client && !ch.trusted()) return ch.failed() ? Cut::failed : Cut::later;
    // Confirmed: a downgrade resends over TCP only once the peer surely knows where the
    // ring's bytes begin (core/conn/downgrade.h).
    if (!ch.post_control_locked(wire::Control{wire::Op::cutover, link.tcp_sent}, true)) return Cut::failed;
    link.tx_cut = true;
    ch.set_queue_limit_locked(queue_limit(s, ch));
    // The program ended its sending side on TCP before the upgrade settled: nothing
    // follows the cutover point but the end of the stream.
    if (link.fin_sent.load()) ch.finish_locked();
    if (link.client) {
      link.proof = ch.proof();
      link.proof_due.store(true);
      link.cut_us.store(now_us(), std::memory_order_relaxed);
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
      // not gone at its head (core/conn/downgrade.cpp): so the proof goes once, and first.
      std::lock_guard<Lock> d(link.down_mu);
      if (!link.proof_due.load()) return true;
      bool confirmed, failed;
      {
        std::lock_guard<Lock> lock(link.channel->mu());
        link.channel->poll_all_locked();
        confirmed = link.channel->confirmed_locked();
        failed = link.channel->failed() || link.tx_left.load();
      }
      if (failed) return false;  // going back to TCP: the backlog carries the proof
      if (confirmed && binding::room(fd)) {
        const size_t sent = binding::send_proof(fd, link.proof);
        if (sent == wire::kProofSize) {
          link.proof_due.store(false);
          stats::add(stats::g.bytes_tcp_sent, wire::kProofSize);
          return true;
        }
        if (sent > 0) {  // the socket broke in the middle of it: TCP says how it ends
          link.proof_due.store(false);
          std::lock_guard<Lock> lock(link.channel->mu());
          link.channel->fail_locked("the TCP connection did not take the proof");
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
  FERRY_POLLER_ONLY();
  std::shared_ptr<Link> link = weak.lock();
  if (!link || !link->proof_due.load() || link->down()) return;
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
    if (tx.owns_lock() && !link.tx_cut && !link.down() && link.established()) {
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
      if (link->tx_cut || link->down()) return;
      if (link->client && link->fin_sent.load()) {
        // Its TCP side ended before the upgrade settled: no proof can follow, so this
        // side never cuts over. The RDMA side goes: the server, seeing it go, reads TCP
        // to its end (and this side reads the server's bytes from TCP, the server never
        // being bound).
        rdma_disconnect(link->channel->id());
        downgrade::want(*link, downgrade::Why::failed);
        return;
      }
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
  // A send holds tx_mu: its next look cuts over. A client tries again anyway (it may
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
  if (link->client || !link->established() || link->down() || link->forged.load() || link->channel->trusted())
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
      ch.poll_all_locked();
      if (!ch.peer_cutover_known() || link->tcp_received.load() < ch.peer_cutover()) return;
    }
    fd = link->fd;
    v = binding::look(fd, *link);
    if (v == binding::Verdict::proven) cut_over_now(fd, *s, *link);
  }
  if (v == binding::Verdict::refused) downgrade::want(*link, downgrade::Why::forged);
}

void end_through_dup(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  if (link.down_state && link.down_state->fd.load() >= 0) real.shutdown(link.down_state->fd.load(), SHUT_WR);
}

void abort_if_unread(int fd, Socket& s) noexcept {
  Link& link = *s.link;
  if (link.inherited || link.down() || s.transport() != Transport::rdma || !link.established()) return;
  {
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    ch.poll_ring_locked();
    if (ch.readable_locked() == 0) return;
  }
  static const linger abort{1, 0};
  if (real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort) == 0) s.linger_s.store(0);
}

void end(int fd, Socket& s, Link& link, bool abortive) noexcept {
  const Cut cut = cut_over(fd, s, link);
  if (cut == Cut::later && !link.fin_sent && !abortive) {
    // Not cut over (yet): TCP carries the end of the stream, as every byte before it.
    link.fin_sent = true;
    fd >= 0 ? static_cast<void>(real.shutdown(fd, SHUT_WR)) : end_through_dup(link);
    return;
  }
  std::lock_guard<Lock> lock(link.channel->mu());
  if (abortive) {
    link.channel->abort_locked();
  } else if (!link.fin_sent && cut == Cut::done) {
    link.channel->finish_locked();
  }
  link.fin_sent = true;
}


void sndbuf_changed(Socket& s) noexcept {
  std::lock_guard<Lock> tx(s.tx_mu);
  if (!s.link || !s.link->tx_cut) return;  // the cutover reads it
  std::lock_guard<Lock> lock(s.link->channel->mu());
  s.link->channel->set_queue_limit_locked(queue_limit(s, *s.link->channel));
}


}  // namespace ferry::send_side
