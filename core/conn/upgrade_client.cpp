// The client's side of the upgrade, on the poller: route, one question per server at
// a time, the request (Hello), and the server's answer (Welcome, a redirect, a refusal).
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"
#include "core/conn/endpoint.h"
#include "core/conn/refusals.h"
#include "core/conn/upgrade_state.h"
#include "core/rdma/rdma.h"

#include <arpa/inet.h>

#include <string>

namespace ferry::upgrade::detail {

using poller::Clock;
using endpoint::unmap;

void start_client_st(Conn* c) {
  FERRY_POLLER_ONLY();
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(poller::cm_channel(), &raw, c, RDMA_PS_TCP) != 0) {
    fail_st(c, stats::g.tcp_resources, "rdma_create_id failed");
    return;
  }
  c->id.reset(raw);
  sockaddr_storage src = c->local, dst = c->peer;
  unmap(src);
  unmap(dst);
  reinterpret_cast<sockaddr_in*>(&src)->sin_port = 0;  // same offset for sin6_port
  if (c->redirect_port) reinterpret_cast<sockaddr_in*>(&dst)->sin_port = htons(c->redirect_port);
  if (rdma_resolve_addr(raw, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                        static_cast<int>(config().upgrade_timeout_ms)) != 0) {
    fail_st(c, stats::g.tcp_no_route, "rdma_resolve_addr failed");
  }
}

// How long a client's other connections to a server wait for one connection's answer
// from it before each asks on its own: a ferry server holds a request until its program
// accepts the connection.
constexpr auto kAskAlone = std::chrono::milliseconds(200);
constexpr const char* kAnsweredNo = "no rdma_cm listener on the port (another connection asked)";

// `asker`'s answer came, or it stopped asking: each connection that waited for it asks
// on its own, unless the answer was that nothing listens there (connect_when_armed_st).
void answered_st(const Link* asker) {
  FERRY_POLLER_ONLY();
  for (const std::weak_ptr<Link>& w : st().askers.answered(asker)) {
    std::shared_ptr<Link> link = w.lock();
    auto it = link ? st().conns.find(link.get()) : st().conns.end();
    if (it == st().conns.end()) continue;
    Conn* c = it->second.get();
    c->waiting = false;
    c->alone = true;
    connect_when_armed_st(c);
  }
}

// c's server answered with a response or a redirect: it runs ferry. Connections to it
// ask without waiting for each other's answers for a while.
void serving_st(const Conn* c) {
  FERRY_POLLER_ONLY();
  st().serving.note(refusals::key_of(c->peer), ns_of(Clock::now()) + refusals::kMemoryNs);
  answered_st(c->link.get());
}

void on_route_event_st(Conn* c, rdma_cm_event_type type) {
  FERRY_POLLER_ONLY();
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (!rdma::id_allowed(c->id.get(), config().devices)) return fail_st(c, stats::g.tcp_device_excluded, "device not in FERRY_DEVICES");
      if (rdma_resolve_route(c->id.get(), static_cast<int>(config().upgrade_timeout_ms)) != 0)
        fail_st(c, stats::g.tcp_no_route, "rdma_resolve_route failed");
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      c->resolved = true;
      return connect_when_armed_st(c);
    default:
      return;
  }
}

// The client connects once the route is known and the program has armed the upgrade.
void connect_when_armed_st(Conn* c) {
  FERRY_POLLER_ONLY();
  int arm = c->link->arm.load();
  if (!c->resolved || arm == Link::undecided || c->committed || c->waiting) return;
  // The last moment either side may still back out alone.
  SocketRef s = c->link->socket.lock();
  if (!s) return fail_st(c, stats::g.tcp_timeout, "closed before the upgrade");
  // Answered by another connection while this one's route was resolved, or while it
  // waited for that answer.
  if (!c->redirect_port && refusals::refused_lately(c->peer)) return fail_st(c, stats::g.tcp_peer_refused, kAnsweredNo);
  const refusals::Key key = refusals::key_of(c->peer);
  // One question per server at a time (refusals::Askers), unless it is known to run ferry.
  if (!c->alone && !c->redirect_port && !st().serving.holds(key, ns_of(Clock::now()))) {
    c->waiting = !st().askers.ask(key, c->link);
    if (c->waiting) {
      const Link* asker = st().askers.asker_of(key);
      return poller::at_st(Clock::now() + kAskAlone, [key, asker] {
        if (st().askers.asker_of(key) == asker) answered_st(asker);  // no answer yet
      });
    }
  }
  std::string why;
  c->pending = build_channel_st(c, std::move(c->id), c->ring_size, why);
  if (!c->pending || !c->pending->prepare_staging(c->ring_size, why))
    return fail_st(c, reason_of(why), why.c_str());
  uint8_t hello[wire::kHelloSize];
  wire::encode(wire::Hello{c->local_port, c->peer_port, c->pending->local_ring()}, hello);
  rdma_conn_param p = rdma::conn_param(c->pending->qp_num(), hello, sizeof hello);
  if (rdma_connect(c->pending->id(), &p) != 0) return fail_st(c, stats::g.tcp_resources, "rdma_connect failed");
  c->committed = true;
  FERRY_LOG(debug, "upgrade", "client port %u -> %u asks to upgrade", c->local_port, c->peer_port);
}

// The server's listening process sent us to the process that serves the connection:
// ask again there, once, with a fresh id and queue pair.
void follow_st(Conn* c, uint16_t port) {
  FERRY_POLLER_ONLY();
  serving_st(c);
  if (c->closed) return fail_st(c, stats::g.tcp_timeout, "redirected");
  stats::add(stats::g.upgrades_redirected, 1);
  FERRY_LOG(debug, "upgrade", "client port %u -> %u redirected to rdma_cm port %u", c->local_port, c->peer_port, port);
  c->redirect_port = port;
  c->committed = false;
  c->resolved = false;
  if (c->pending) {
    c->pending->id()->context = nullptr;
    std::shared_ptr<Channel> rejected(std::move(c->pending));
    poller::at_st(Clock::now(), [rejected] {});  // its event was acknowledged: gone after this round
  }
  start_client_st(c);
}

// The reject reason an IB CM (and RoCE's) gives when nothing listens on the port.
constexpr int kNoListener = 8;  // IB_CM_REJ_INVALID_SERVICE_ID

void on_client_event_st(Conn* c, rdma_cm_event_type type, int status, const void* data, uint8_t len) {
  FERRY_POLLER_ONLY();
  std::string why;
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return on_route_event_st(c, type);
    case RDMA_CM_EVENT_CONNECT_RESPONSE: {  // the QP is ours: rdma_cm leaves it to us
      serving_st(c);
      if (c->closed) return fail_st(c, stats::g.tcp_timeout, "accepted");
      wire::Welcome w;
      wire::Error e = wire::decode(data, len, w);
      if (e != wire::Error::ok) return fail_st(c, stats::g.tcp_peer_refused, wire::to_string(e));
      // The server writes into as much of our ring as its own is large.
      if (!c->pending->use_ring(w.ring.size, why) || !c->pending->set_peer(w.ring, why))
        return fail_st(c, stats::g.tcp_peer_refused, why.c_str());
      uint64_t secret = 0;
      if (!binding::secret(secret)) return fail_st(c, stats::g.tcp_resources, "no randomness to bind the upgrade with");
      // Nothing the server says counts until it proved it read our proof (core/conn/binding.h).
      c->pending->await_bound(w.nonce, secret);
      if (!c->pending->activate(why)) return fail_st(c, reason_of(why), why.c_str());
      if (rdma_establish(c->pending->id()) != 0) return fail_st(c, stats::g.tcp_resources, "rdma_establish failed");
      return established_st(c);
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return fail_st(c, stats::g.tcp_no_route, rdma_event_str(type));
    case RDMA_CM_EVENT_REJECTED: {
      wire::Redirect r;
      if (!c->redirect_port && wire::decode(data, len, r) == wire::Error::ok) return follow_st(c, r.port);
      if (!c->redirect_port && status == kNoListener) {
        refusals::note_refusal(c->peer);  // the server runs no ferry: not asked again for a while
        return fail_st(c, stats::g.tcp_peer_refused, "REJECTED: no rdma_cm listener on the port");
      }
      return fail_st(c, stats::g.tcp_peer_refused, rdma_event_str(type));
    }
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return fail_st(c, stats::g.tcp_peer_refused, rdma_event_str(type));
    default:
      return;
  }
}

}  // namespace ferry::upgrade::detail
