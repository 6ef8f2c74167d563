// The server's side of the upgrade, on the poller: a request (Hello) matched to the
// connection it names, held until the program accepts it or sent on to the process
// that serves it, and answered (Welcome) with the nonce the client's proof must carry.
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"
#include "core/conn/claims.h"
#include "core/conn/endpoint.h"
#include "core/conn/upgrade_state.h"
#include "core/rdma/rdma.h"

#include <unistd.h>

#include <mutex>
#include <string>

namespace ferry::upgrade::detail {

using poller::Clock;
using endpoint::conn_key;

namespace {
void answer_st(const std::shared_ptr<Link>& link, Clock::time_point until);
}  // namespace

void accept_request_st(Conn* c, rdma::CmId id, const wire::Hello& h) {
  FERRY_POLLER_ONLY();
  st().awaiting.erase(c->key);
  if (c->claimed) {  // the request we claimed it for has come
    claims::shared()->drop(c->key, getpid());
    c->claimed = false;
  }
  c->key.clear();
  if (c->link->arm.load() == Link::undecided) c->link->arm_awaited.store(true);
  if (c->link->arm.load() == Link::undecided) {
    // Matched; answered at the program's first data call on the connection, made by
    // whichever process uses it. A process that forks and leaves the connection to its
    // child never answers, and the client stays on TCP with the child.
    c->parked = std::move(id);
    c->parked_hello = h;
    st().parked.insert(c);
    schedule_recheck_st();
    return;
  }
  SocketRef s = c->link->socket.lock();
  if (!s) {
    reject_st(std::move(id));
    return fail_st(c, stats::g.tcp_timeout, "closed before the upgrade");
  }
  id->context = c;
  std::string why;
  // Both rings are the smaller end's: ours is no larger than the client's, which sized
  // its staging area to it, and we stage (and write into) only as much of the client's
  // ring as of ours, whatever size it advertised. The Welcome's ring size tells it.
  uint64_t ring = std::min<uint64_t>(c->ring_size, h.ring.size);
  c->pending = build_channel_st(c, std::move(id), ring, why);
  if (!c->pending) return fail_st(c, reason_of(why), why.c_str());
  // Whoever asked must prove, through the TCP connection, that it is its client before
  // anything of the ring counts (core/conn/binding.h).
  wire::Nonce nonce;
  if (!binding::nonce(nonce)) {
    rdma_reject(c->pending->id(), nullptr, 0);
    return fail_st(c, stats::g.tcp_resources, "no randomness to bind the upgrade with");
  }
  c->pending->await_proof(nonce);
  if (!c->pending->set_peer(wire::RingRef{h.ring.addr, h.ring.rkey, ring}, why) || !c->pending->activate(why)) {
    rdma_reject(c->pending->id(), nullptr, 0);
    return fail_st(c, reason_of(why), why.c_str());
  }
  answer_st(c->link, Clock::now() + window());
}

namespace {

// Sends the Welcome of c's built channel. Receives wait while it is out
// (Link::answered), and one that looked before it went must have finished its read
// first: it could take the client's proof as the stream's. So it goes while the
// socket's receive side is free, a moment later if a receive holds it now.
void answer_st(const std::shared_ptr<Link>& link, Clock::time_point until) {
  FERRY_POLLER_ONLY();
  auto it = st().conns.find(link.get());
  if (it == st().conns.end() || !it->second->pending || it->second->committed) return;
  Conn* c = it->second.get();
  SocketRef s = link->socket.lock();
  std::unique_lock<Lock> rx;
  if (s) rx = std::unique_lock<Lock>(s->rx_mu, std::try_to_lock);
  if (!s || (!rx.owns_lock() && Clock::now() >= until)) {
    rdma_reject(c->pending->id(), nullptr, 0);
    return fail_st(c, stats::g.tcp_timeout, s ? "its receives left no moment to answer" : "closed before the upgrade");
  }
  if (!rx.owns_lock()) {
    poller::at_st(Clock::now() + std::chrono::milliseconds(1), [weak = std::weak_ptr<Link>(link), until] {
      if (std::shared_ptr<Link> l = weak.lock()) answer_st(l, until);
    });
    return;
  }
  bool closed;
  {
    std::lock_guard<Lock> w(link->watch_mu);
    closed = link->closed;
    if (!closed) {
      link->welcome_nonce = c->pending->nonce();
      link->answered.store(true);
    }
  }
  rx.unlock();
  if (closed) {
    rdma_reject(c->pending->id(), nullptr, 0);
    return fail_st(c, stats::g.tcp_timeout, "closed before the upgrade");
  }
  uint8_t welcome[wire::kWelcomeSize];
  wire::encode(wire::Welcome{c->pending->local_ring(), c->pending->nonce()}, welcome);
  rdma_conn_param p = rdma::conn_param(c->pending->qp_num(), welcome, sizeof welcome);
  if (rdma_accept(c->pending->id(), &p) != 0) return fail_st(c, stats::g.tcp_resources, "rdma_accept failed");
  c->committed = true;
  // A handshake that never settles must not hold the receives for good.
  poller::at_st(Clock::now() + 2 * window(), [weak = std::weak_ptr<Link>(link)] {
    std::shared_ptr<Link> l = weak.lock();
    if (!l || l->state() != ConnState::handshake) return;
    auto at = st().conns.find(l.get());
    if (at == st().conns.end()) return;
    fail_st(at->second.get(), stats::g.tcp_timeout, "the answered handshake did not settle");
  });
}

}  // namespace

void on_request_st(rdma_cm_id* raw, const Listener* l, const void* data, uint8_t len) {
  FERRY_POLLER_ONLY();
  rdma::CmId id(raw);
  id->context = nullptr;
  wire::Hello h;
  wire::Error e = wire::decode(data, len, h);
  if (e == wire::Error::ok && !l->redirect && h.server_port != l->port) e = wire::Error::bad_port;
  if (e != wire::Error::ok) {
    stats::add(stats::g.requests_malformed, 1);
    FERRY_LOG(info, "upgrade", "rejected a request on port %u: %s", l->port, wire::to_string(e));
    return reject_st(std::move(id));
  }
  std::string key = conn_key(rdma_get_peer_addr(raw), h.client_port, h.server_port);
  auto it = st().awaiting.find(key);
  if (l->redirect) {
    // Sent here by the listening process: only a connection we claimed qualifies.
    if (it != st().awaiting.end() && it->second->claimed) return accept_request_st(it->second, std::move(id), h);
    stats::add(stats::g.requests_unmatched, 1);
    return reject_st(std::move(id));
  }
  claims::Claim who;
  if (claimed_elsewhere(key, who)) return redirect_st(std::move(id), who.port);
  if (it != st().awaiting.end()) return accept_request_st(it->second, std::move(id), h);
  // Let go here; without a claims table nobody else can serve it.
  if (!claims::shared() && is_gone_st(key)) {
    stats::add(stats::g.requests_unmatched, 1);
    FERRY_LOG(debug, "upgrade", "refused a request for a connection already let go (%s port %u to %u)",
              endpoint::ip_text(rdma_get_peer_addr(raw)).c_str(), h.client_port, h.server_port);
    return reject_st(std::move(id));
  }
  hold_st(std::move(id), h, std::move(key));
}

// A server gives up on a handshake after its Welcome went (its own ESTABLISHED never
// came: the client's last handshake message was lost, or the client vanished). Its
// client's may have come, and then the client has cut over: its proof follows its bytes
// on TCP, and a downgrade's header follows the proof. Whether it did is in the queue
// pair we built: stopped first, so that nothing more lands or is acknowledged, it holds
// the client's cutover message if it ever acknowledged one. Then the connection counts
// as established, with a failed channel, and goes back to TCP by the downgrade (which
// takes the proof and the header where they are); else TCP never carried either.
bool settled_at_client_st(Conn* c) {
  FERRY_POLLER_ONLY();
  if (c->link->client || !c->committed || !c->pending || c->closed || c->link->socket.expired()) return false;
  Channel& ch = *c->pending;
  {
    std::lock_guard<Lock> lock(ch.mu());
    ch.stop_locked();
    ch.poll_all_locked();
    if (!ch.peer_cutover_known()) return false;
    ch.fail_locked("the client cut over on a handshake that did not settle here");
  }
  FERRY_LOG(info, "upgrade", "server port %u -> %u: the client cut over on a handshake that did not settle here: "
            "back to TCP", c->local_port, c->peer_port);
  rdma_disconnect(ch.id());
  established_st(c);
  return true;
}

void on_server_event_st(Conn* c, rdma_cm_event_type type) {
  FERRY_POLLER_ONLY();
  switch (type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      return established_st(c);
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
      return fail_st(c, stats::g.tcp_peer_refused, rdma_event_str(type));
    default:
      return;
  }
}

void start_server_st(Conn* c) {
  FERRY_POLLER_ONLY();
  st().awaiting[c->key] = c;
  st().gone.erase(c->key);  // a new connection with the same addresses and ports
  if (std::optional<Held> h = st().held.take(c->key)) accept_request_st(c, std::move(h->id), h->hello);
}

}  // namespace ferry::upgrade::detail
