// A connection's upkeep on the poller once the handshake is over: once a tick, persist
// probes and the binding's patience for every live connection; and a closed
// connection's retirement (what it sent flushed as the peer makes room, then its RDMA
// side closed).
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/base/wait.h"
#include "core/conn/binding.h"
#include "core/conn/channel.h"
#include "core/conn/downgrade.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/send_side.h"
#include "core/conn/upgrade_state.h"

#include <chrono>
#include <memory>
#include <mutex>

namespace ferry::upgrade::detail {

using poller::Clock;

// Persist probes (flow::Prober): once a tick, every channel whose bytes wait for room
// at a peer that returned no credit since the last tick sends it an empty write, so a
// peer host that vanished fails the queue pair (and the connection goes on over TCP,
// whose own timeouts then speak, as without ferry).
constexpr auto kProbeEvery = std::chrono::seconds(1);

// Binding (core/conn/binding.h), once a tick: a server whose client's proof came while
// nobody could take it takes it now; a client not bound binding::kPatience after its
// cutover (its proof unanswered, or not even written) goes on over TCP (its queued
// bytes with it).
void binding_tick_st(Link* l) {
  FERRY_POLLER_ONLY();
  if (l->channel->trusted() || l->down()) return;
  auto it = st().conns.find(l);
  if (it == st().conns.end()) return;
  const Conn* c = it->second.get();
  if (!l->client) return send_side::look_for_proof(c->link);
  const int64_t cut = l->cut_us.load(std::memory_order_relaxed);
  if (cut == 0 || now_us() - cut < std::chrono::duration_cast<std::chrono::microseconds>(binding::kPatience).count())
    return;
  FERRY_LOG(warn, "binding", "port %u -> %u: %s: going on over TCP", c->local_port, c->peer_port,
            l->proof_due.load() ? "our proof could not go into TCP" : "the RDMA peer never answered our proof");
  {
    std::lock_guard<Lock> lock(l->channel->mu());
    l->channel->fail_locked("the peer did not prove it holds the TCP connection");
  }
  downgrade::want(*l, downgrade::Why::failed);  // counted unproven; the queued bytes go over TCP at the program's next call
}

void probe_tick_st() {
  FERRY_POLLER_ONLY();
  st().probing = false;
  for (Link* l : st().live) binding_tick_st(l);
  for (Link* l : st().live) {
    std::lock_guard<Lock> lock(l->channel->mu());
    l->channel->probe_locked();
  }
  schedule_probe_st();
}

void schedule_probe_st() {
  FERRY_POLLER_ONLY();
  if (st().probing || st().live.empty()) return;
  st().probing = true;
  poller::at_st(Clock::now() + kProbeEvery, probe_tick_st);
}

// How long a closed connection waits for its peer to make progress (room in its ring
// for queued bytes, completions of what was posted) before it is dropped. Looks come
// every millisecond at first, then every kSlowLook: a peer that stopped reading should
// not cost a poller look per millisecond for a minute.
constexpr auto kRetirePatience = std::chrono::seconds(60);
constexpr auto kFastLooks = std::chrono::seconds(2);
constexpr auto kSlowLook = std::chrono::milliseconds(50);

// A client connection closed while its request was out: the answer still tells whether
// the server runs ferry (core/conn/refusals.h), to the connections that wait for it
// (Askers) and to the process's next ones. Without it, a client that closes each
// connection sooner than a plain server's rdma_cm can refuse would never learn, and
// would ask again for every connection. The handshake stays for its answer, one
// upgrade window at most, and is dropped with it.
void await_answer_st(Conn* c) {
  FERRY_POLLER_ONLY();
  c->closed = true;
  poller::at_st(Clock::now() + window(), [weak = std::weak_ptr<Link>(c->link)] {
    std::shared_ptr<Link> link = weak.lock();
    auto it = link ? st().conns.find(link.get()) : st().conns.end();
    if (it != st().conns.end()) fail_st(it->second.get(), stats::g.tcp_timeout, "no answer to its request");
  });
}

// How long a server whose program closed its socket before its client's proof came
// keeps the socket for that proof (upgrade::closing): the client writes it within
// binding::kPatience of its cutover, which follows the server's answer within a window.
constexpr auto kProofAfterClose = 2 * binding::kPatience;

// Whether a server's proof can no longer come to a socket its program closed: taken
// from ferry's duplicate of it, or other bytes there (the kernel's close resets TCP, as
// it would without ferry), or TCP ended, or too long. Each look is a peek.
bool proof_settled_st(Conn* c, Clock::time_point since) {
  FERRY_POLLER_ONLY();
  Link& l = *c->link;
  if (l.client || !l.answered.load() || l.down() || l.forged.load() || Clock::now() - since > kProofAfterClose)
    return true;
  Channel* ch = l.channel ? l.channel.get() : c->pending.get();
  if (!ch) return true;
  wire::Nonce nonce;
  {
    std::lock_guard<Lock> lock(ch->mu());
    if (ch->trusted() || ch->failed()) return true;
    nonce = ch->nonce();
  }
  std::lock_guard<Lock> lock(l.down_mu);  // keeps the duplicate's number from moving
  const int fd = l.down_state ? l.down_state->fd.load() : -1;
  return fd < 0 || binding::take_left(fd, nonce) != binding::Verdict::wait;
}

// Flushes what was sent (the send queue as the peer makes room, as kernel TCP would
// after a close), then closes the RDMA side and the TCP duplicate. `progress` is when
// the peer last made progress.
void retire_st(const std::shared_ptr<Link>& link, Clock::time_point progress) {
  FERRY_POLLER_ONLY();
  auto it = st().conns.find(link.get());
  if (it == st().conns.end()) return;
  Conn* c = it->second.get();
  if (!proof_settled_st(c, progress)) {
    // Nothing waits on it but the duplicate: a look every kSlowLook is enough, and a
    // server closing hundreds of connections a second pays no more.
    poller::at_st(Clock::now() + kSlowLook, [link, progress] { retire_st(link, progress); });
    return;
  }
  if (link->channel && link->down()) {
    // Going back to TCP: the backlog goes out through ferry's duplicate of the socket.
    if (!downgrade::flushed(*link) && Clock::now() - progress < kRetirePatience) {
      poller::at_st(Clock::now() + kSlowLook, [link, progress] { retire_st(link, progress); });
      return;
    }
    downgrade::close_dup(*link);
    rdma_disconnect(link->channel->id());
  } else if (link->channel) {
    const auto now = Clock::now();
    bool drained, to_tcp;
    {
      std::lock_guard<Lock> lock(link->channel->mu());
      Channel& ch = *link->channel;
      const size_t unsent = ch.unsent_locked();
      ch.poll_all_locked();
      // A peer that disconnected reads nothing more: what is left is lost with it, as
      // with kernel TCP when the peer's socket is gone.
      drained = ch.failed() || link->peer_gone.load() || (ch.drained_locked() && ch.sq_outstanding_locked() == 0);
      // A client's bytes held for a peer that never proved it was the TCP connection's
      // server (core/conn/binding.h) belong to that server: they go over TCP.
      to_tcp = link->client && !ch.trusted() && !ch.drained_locked() && (ch.failed() || link->peer_gone.load());
      if (ch.unsent_locked() != unsent) progress = now;
    }
    if (to_tcp) {
      downgrade::want(*link, downgrade::Why::failed);
      return retire_st(link, now);
    }
    if (!drained && now - progress < kRetirePatience) {
      const auto next = now - progress < kFastLooks ? std::chrono::milliseconds(1) : kSlowLook;
      poller::at_st(now + next, [link, progress] { retire_st(link, progress); });
      return;
    }
    downgrade::close_dup(*link);  // kept for a binding that came (closing())
    rdma_disconnect(link->channel->id());
  } else if (link->client && c->committed && link->state() == ConnState::handshake) {
    return await_answer_st(c);
  }
  drop_st(c);
}

}  // namespace ferry::upgrade::detail
