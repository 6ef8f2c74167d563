// A server's side of requests it cannot answer at once: requests held for a connection
// the program has not accepted (or that another process of the tree serves), the
// connections this process let go of, and the claims and redirects that send a
// request on to the process that serves its connection (core/conn/claims.h), and the limit
// on the wait for a request that never comes. Poller thread.
#include "core/conn/upgrade_state.h"

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/rules.h"
#include "core/base/stats.h"
#include "core/base/tcp_only.h"
#include "core/conn/claims.h"
#include "core/conn/endpoint.h"

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferry::upgrade::detail {

using poller::Clock;
using endpoint::conn_key;
using endpoint::unmap;

namespace {

// How long a let-go server connection is remembered: a client asks at its first data
// call once its route is resolved, which takes at most two upgrade windows.
std::chrono::milliseconds gone_memory() { return std::min(accept_wait(), 2 * window()); }

void recheck_st() {
  FERRY_POLLER_ONLY();
  st().rechecking = false;
  claims::Claim who;
  st().held.take_if([&](const std::string& key, Held& h) {
    if (!claimed_elsewhere(key, who)) return false;
    redirect_st(std::move(h.id), who.port);
    return true;
  });
  for (auto it = st().parked.begin(); it != st().parked.end();) {
    Conn* c = *it;
    if (claimed_elsewhere(key_of_conn(c), who)) {
      redirect_st(std::move(c->parked), who.port);
      it = st().parked.erase(it);
    } else {
      ++it;
    }
  }
  schedule_recheck_st();
}

void schedule_held_sweep_st();

// Requests held as long as FERRY_ACCEPT_WAIT_MS allows, oldest first.
void sweep_held_st() {
  FERRY_POLLER_ONLY();
  st().sweeping_held = false;
  st().held.expire(Clock::now(), [](Held& h) {
    stats::add(stats::g.requests_unmatched, 1);
    reject_st(std::move(h.id));
  });
  schedule_held_sweep_st();
}

// One timer for all of them: the oldest's deadline.
void schedule_held_sweep_st() {
  FERRY_POLLER_ONLY();
  if (st().sweeping_held || st().held.empty()) return;
  st().sweeping_held = true;
  poller::at_st(st().held.next_deadline(), sweep_held_st);
}

// This process's rdma_cm port for requests redirected to it, 0 when it has none.
uint16_t redirect_port_st(sa_family_t family) {
  FERRY_POLLER_ONLY();
  std::unique_ptr<Listener>& slot = family == AF_INET6 ? st().redirect6 : st().redirect4;
  if (slot) return slot->port;
  auto l = std::make_unique<Listener>();
  l->redirect = true;
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(poller::cm_channel(), &raw, l.get(), RDMA_PS_TCP) != 0) return 0;
  l->id.reset(raw);
  sockaddr_storage any{};  // the wildcard address; rdma_cm picks the port
  any.ss_family = family;
  if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&any)) != 0 || rdma_listen(raw, 1024) != 0) {
    FERRY_LOG(info, "upgrade", "no rdma_cm listener for redirected requests (%s)", strerror(errno));
    return 0;
  }
  l->port = ntohs(rdma_get_src_port(raw));
  FERRY_LOG(debug, "upgrade", "rdma_cm listening for redirected requests on port %u", l->port);
  slot = std::move(l);
  return slot->port;
}

// Waits for a request that end within this of each other end at one wakeup of the
// poller: a server that a stream of short plain connections keeps busy wakes a few
// times a window, not once a connection.
Clock::duration deadline_slack() { return window() / 8; }

void schedule_sweep_st();

void sweep_deadlines_st() {
  FERRY_POLLER_ONLY();
  st().sweeping = false;
  const auto now = Clock::now();
  auto& due = st().deadlines;
  while (!due.empty() && due.begin()->first <= now) {
    std::shared_ptr<Link> link = due.begin()->second.lock();
    due.erase(due.begin());
    if (!link) continue;
    auto it = st().conns.find(link.get());
    if (it == st().conns.end() || it->second->committed || it->second->parked ||
        link->state() != ConnState::handshake)
      continue;
    fail_st(it->second.get(), stats::g.tcp_peer_refused, "no upgrade request from the peer");
  }
  schedule_sweep_st();
}

void schedule_sweep_st() {
  FERRY_POLLER_ONLY();
  if (st().sweeping || st().deadlines.empty()) return;
  st().sweeping = true;
  poller::at_st(st().deadlines.begin()->first + deadline_slack(), sweep_deadlines_st);
}

}  // namespace

// A server connection whose peer has sent bytes without asking for an upgrade within
// the window since stays on TCP: a client under ferry asks at its first data call,
// before its first byte. Until the peer sends, the wait costs nothing but a table
// entry.
void arm_deadline_st(Conn* c) {
  FERRY_POLLER_ONLY();
  const int64_t spoke = c->link->spoke_ns.load();
  if (spoke == 0 || c->link->client || c->committed || c->parked ||
      c->link->limit_armed.load(std::memory_order_relaxed))
    return;
  // Bytes before the launch (the program posted it after the watch began): the launch
  // arms it, so that the deadline finds the connection in the table.
  if (!c->adopted) return;
  c->link->limit_armed.store(true, std::memory_order_relaxed);
  st().deadlines.emplace(Clock::time_point(std::chrono::nanoseconds(spoke)) + window(), c->link);
  schedule_sweep_st();
}

std::string key_of_conn(const Conn* c) {
  return conn_key(reinterpret_cast<const sockaddr*>(&c->peer), c->peer_port, c->local_port);
}

void remember_gone_st(const Conn* c) {
  FERRY_POLLER_ONLY();
  // The key made at the start, unless a request matched it since.
  remember_gone_key_st(c->key.empty() ? key_of_conn(c) : c->key);
}

void remember_gone_key_st(std::string key) {
  FERRY_POLLER_ONLY();
  const auto now = Clock::now();
  while (!st().gone_order.empty() && st().gone_order.front().second <= now) {
    auto it = st().gone.find(st().gone_order.front().first);
    if (it != st().gone.end() && it->second <= now) st().gone.erase(it);
    st().gone_order.pop_front();
  }
  const auto until = now + gone_memory();
  st().gone[key] = until;
  st().gone_order.emplace_back(std::move(key), until);
}

std::atomic<uint64_t>* kept_on_tcp(bool client, const sockaddr_storage& local, const sockaddr_storage& peer,
                                   const rules::Rule*& rule) {
  std::atomic<uint64_t>* reason = nullptr;
  if (const uint8_t why = tcp_only::why()) {
    reason = why & tcp_only::io_uring ? &stats::g.tcp_io_uring : &stats::g.tcp_credentials;
  } else {
    const rules::Subject who{rules::program_name(), rules::program_path(),
                             client ? rules::Role::client : rules::Role::server};
    rule = rules::match(rules::active(), who, local, peer);
    if (!rule || rule->action != rules::Action::tcp) return nullptr;
    reason = &stats::g.tcp_rule;
    FERRY_LOG(debug, "upgrade", "kept on TCP by rule of line %d", rule->line);
  }
  if (client || !poller::running()) return reason;
  const auto* p = reinterpret_cast<const sockaddr*>(&peer);
  std::string key = conn_key(p, endpoint::port_of(p), endpoint::port_of(reinterpret_cast<const sockaddr*>(&local)));
  poller::post([key = std::move(key)] {
    if (std::optional<Held> h = st().held.take(key)) reject_st(std::move(h->id));  // came before the accept
    remember_gone_key_st(key);
  });
  return reason;
}

bool is_gone_st(const std::string& key) {
  FERRY_POLLER_ONLY();
  auto it = st().gone.find(key);
  return it != st().gone.end() && it->second > Clock::now();
}

// Another process of the tree serves `key` (core/conn/claims.h).
bool claimed_elsewhere(const std::string& key, claims::Claim& who) {
  claims::Table* t = claims::shared();
  return t && t->find(key, ns_of(Clock::now()), who) && who.pid != getpid();
}

void redirect_st(rdma::CmId id, uint16_t port) {
  FERRY_POLLER_ONLY();
  uint8_t data[wire::kRedirectSize];
  wire::encode(wire::Redirect{port}, data);
  stats::add(stats::g.requests_redirected, 1);
  rdma_reject(id.get(), data, sizeof data);
}

// Held and parked requests are looked up in the claims every few milliseconds: the
// process that serves the connection claims it at its first data call.
void schedule_recheck_st() {
  FERRY_POLLER_ONLY();
  if (st().rechecking || !claims::shared() || (st().held.empty() && st().parked.empty())) return;
  st().rechecking = true;
  poller::at_st(Clock::now() + std::chrono::milliseconds(2), recheck_st);
}

// A request nobody here can answer yet: the program has not accepted its connection,
// or the process that serves it has not claimed it.
void hold_st(rdma::CmId id, const wire::Hello& h, std::string key) {
  FERRY_POLLER_ONLY();
  // The key without its two ports (endpoint::conn_key): the peer's address.
  std::string source = key.substr(0, key.size() > 4 ? key.size() - 4 : 0);
  if (!st().held.admits(source)) {
    stats::add(stats::g.requests_dropped, 1);
    return reject_st(std::move(id));
  }
  st().held.push({std::move(id), h}, std::move(key), std::move(source), Clock::now() + accept_wait());
  schedule_held_sweep_st();
  schedule_recheck_st();
}


// A connection accepted on a listener another process of the tree opened (or inherited
// from the process that accepted it): that process's rdma_cm listener receives the
// request, and redirects it here once it finds our claim.
void claim_st(Conn* c) {
  FERRY_POLLER_ONLY();
  claims::Table* t = claims::shared();
  if (!t) return fail_st(c, stats::g.tcp_other_listener, "no claims table shared with the listening process");
  sockaddr_storage local = c->local;
  unmap(local);
  const uint16_t port = redirect_port_st(local.ss_family);
  if (!port) return fail_st(c, stats::g.tcp_resources, "no rdma_cm listener for redirected requests");
  const int64_t now = ns_of(Clock::now());
  if (!t->claim(c->key, {getpid(), port}, now, now + ns_of(Clock::time_point(accept_wait()))))
    return fail_st(c, stats::g.tcp_resources, "the claims table has no room");
  c->claimed = true;
}

}  // namespace ferry::upgrade::detail
