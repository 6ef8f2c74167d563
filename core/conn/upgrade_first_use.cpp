// A connection's upgrade goes ahead at its first use: the first data call of whichever
// process makes it. That is mostly the process that accepted or connected it, but may
// be a forked child that inherited it unused (reclaim), or the receiver of a
// descriptor passed unused (passing / passed_in, through the claims table).
#include "core/conn/upgrade.h"

#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/claims.h"
#include "core/conn/endpoint.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/upgrade_state.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>

namespace ferry::upgrade {

using namespace detail;
using poller::Clock;
using endpoint::addresses;
using endpoint::conn_key;
using endpoint::port_of;
using endpoint::tcp_counts;

namespace {

// The claims table's note that a connection was passed unused: its key in a space of
// its own, so that no redirect ever reads it.
bool passed_key(int fd, std::string& key) {
  sockaddr_storage local, peer;
  if (!addresses(fd, local, peer)) return false;
  key = "passed|" + conn_key(reinterpret_cast<const sockaddr*>(&peer), port_of(reinterpret_cast<const sockaddr*>(&peer)),
                             port_of(reinterpret_cast<const sockaddr*>(&local)));
  return key.size() < claims::kKeySize;
}

}  // namespace

void passing(int fd, Socket& s) noexcept {
  claims::Table* t = claims::shared();
  std::string key;
  if (!t || !s.link || s.link->client || s.link->inherited || s.link->arm.load() != Link::undecided ||
      s.transport() != Transport::upgrading || !passed_key(fd, key))
    return;
  const int64_t now = ns_of(Clock::now());
  t->claim(key, {getpid(), 0}, now, now + ns_of(Clock::time_point(accept_wait())));
}

void passed_in(int fd, const SocketRef& s) noexcept {
  claims::Table* t = claims::shared();
  std::string key;
  claims::Claim who;
  if (!t || s->role() != Role::active || s->link || !passed_key(fd, key) || !t->find(key, ns_of(Clock::now()), who))
    return;
  t->drop(key, who.pid);
  FERRY_LOG(debug, "upgrade", "fd %d: a connection passed unused by process %d: upgrading it here", fd, who.pid);
  start(fd, s, false, true, false);
}

namespace {

// A forked child's first data call on a connection its parent had not yet used: the
// child serves it, so the child upgrades it, with the Link it inherited (which holds
// none of the parent's RDMA objects: nothing is built before the first data call).
void reclaim(int fd, Socket& s, const std::shared_ptr<Link>& link) {
  sockaddr_storage local, peer;
  uint64_t received = 0;
  if (!rdma_ready() || !addresses(fd, local, peer) || !tcp_counts(fd, link->client, link->tcp_sent, received)) {
    link->transition(ConnState::handshake, ConnState::failed);
    return;
  }
  link->tcp_received.store(received);
  link->fd = fd;
  link->inherited = false;
  auto conn = make_conn(link, local, peer);
  if (!link->client) {
    conn->key = key_of_conn(conn.get());
    conn->foreign = true;  // the rdma_cm listener, if any, is an ancestor's
  }
  {
    std::lock_guard<Lock> lock(link->watch_mu);
    link->watcher = conn.get();
    link->unwatched = false;  // the watch is this process's now
    // The wait for the request starts afresh here, as the parent's did.
    link->spoke_ns.store(0);
    link->launch.store(Link::taken);  // the parent's post, if any, is the parent's
    link->limit_armed.store(false);
    link->watching.store(poller::watch(fd, kWatchHandshake, conn.get()));
  }
  stats::add(stats::g.upgrades_started, 1);
  stats::add(stats::g.upgrades_reclaimed, 1);
  launch(std::move(conn));
}

}  // namespace

void first_data_call(int fd, Socket& s) noexcept {
  std::shared_ptr<Link> link = s.link;
  if (!link || link->arm.load() != Link::undecided) return;
  if (link->inherited && !link->reclaimable) return;
  int expected = Link::undecided;
  if (!link->arm.compare_exchange_strong(expected, Link::go)) return;
  if (link->inherited) return reclaim(fd, s, link);
  if (!link->client && !link->arm_awaited.load()) return;  // the poller holds nothing for it
  poller::submit([link] {
    auto it = st().conns.find(link.get());
    if (it == st().conns.end()) return;
    Conn* c = it->second.get();
    if (link->client) return connect_when_armed_st(c);
    if (c->foreign && !c->claimed && !c->committed) return claim_st(c);
    if (c->parked) {
      st().parked.erase(c);
      rdma::CmId id = std::move(c->parked);
      accept_request_st(c, std::move(id), c->parked_hello);
    }
  });
}

}  // namespace ferry::upgrade
