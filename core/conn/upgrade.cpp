#include "core/conn/upgrade.h"

#include "core/base/wait.h"
#include "core/conn/upgrade_state.h"

#include "core/base/config.h"
#include "core/base/fork_spare.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/rules.h"
#include "core/base/signals.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"
#include "core/conn/claims.h"
#include "core/conn/downgrade.h"
#include "core/conn/endpoint.h"
#include "core/conn/fdtable.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/refusals.h"
#include "core/conn/send_side.h"
#include "core/rdma/rdma.h"
#include "core/rdma/rdma_lib.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ferry::upgrade {
namespace detail {

using poller::Clock;
using endpoint::addresses;
using endpoint::conn_key;
using endpoint::is_loopback;
using endpoint::port_of;
using endpoint::tcp_counts;
using endpoint::unmap;

FERRY_FORK_DATA State* g_state = new State;  // replaced, not destroyed, in a forked child
// Whether requests wait in State::held for a connection not yet launched (set by the
// poller at the end of each round, written only when it changes; read by launch()).
FERRY_FORK_DATA std::atomic<bool> g_requests_held{false};
FERRY_FORK_DATA forking::Spare<State> g_spare;
State& st() { return *g_state; }

// How long a request may wait for the program to accept its TCP connection
// (FERRY_ACCEPT_WAIT_MS). The client's rdma_cm keeps retrying its request for about a
// minute, so a longer wait ends with the client giving up on its own.
std::chrono::milliseconds accept_wait() { return std::chrono::milliseconds(config().accept_wait_ms); }

std::chrono::milliseconds window() { return std::chrono::milliseconds(config().upgrade_timeout_ms); }

bool rdma_ready() {
  static constexpr poller::User kUpgrade{on_cm_event_st, [] {
                                           end_of_batch_st();
                                           answer_flush_st();
                                         },
                                         channel_barrier};
  poller::serve(kUpgrade);
  on_release(release);  // before any socket has a link or an rdma_cm listener
  return poller::available();
}

std::unique_ptr<Conn> make_conn(const std::shared_ptr<Link>& link, const sockaddr_storage& local,
                                const sockaddr_storage& peer) {
  auto c = std::make_unique<Conn>();
  c->link = link;
  c->local = local;
  c->peer = peer;
  c->local_port = port_of(reinterpret_cast<const sockaddr*>(&local));
  c->peer_port = port_of(reinterpret_cast<const sockaddr*>(&peer));
  c->ring_size = config().ring_size;  // a rule may set its own (start())
  return c;
}

// Attaches a fresh Link to s, moves it to `upgrading` and starts watching its TCP side
// (here, on the program's thread, while fd surely is this socket). Program thread.
std::unique_ptr<Conn> begin(int fd, const SocketRef& s, bool client, const sockaddr_storage& local,
                            const sockaddr_storage& peer, bool fresh) {
  // A Link's channel owns its QP and CQ, which only the poller thread may destroy (it
  // may be in the middle of their completions); whoever drops the last reference to a
  // link with a channel hands it there.
  std::shared_ptr<Link> link(new Link, [](Link* l) {
    if (l->inherited) return;  // the parent's objects: see Link::inherited
    // Without a channel it owns no RDMA object (nor a place in the poller's `live`).
    // With one, it goes when the poller frees the work, once the round's events were
    // handled (one may name its duplicate's watch).
    if (!l->channel) return delete l;
    // The poller's copy must be the last reference: a copy left here would be dropped
    // after the poller may have run the work, deleting the link on this thread.
    std::shared_ptr<Link> last(l, [](Link* gone) { delete gone; });
    poller::submit([last = std::move(last)] { st().live.erase(last.get()); });  // without a poller: deleted here
  });
  link->client = client;
  link->socket = s;
  link->fd = fd;
  uint64_t received = 0;
  // A socket accept() has just returned: the program has read and written nothing on
  // it yet, and four system calls a connection are saved.
  if (!fresh && !tcp_counts(fd, client, link->tcp_sent, received)) return nullptr;
  link->tcp_received.store(received);
  auto c = make_conn(link, local, peer);
  s->link = link;
  if (!link->attach(*s)) return nullptr;
  // After the transition: a later setsockopt sees it and sets the link's copy itself.
  link->rcvlowat.store(s->rcvlowat.load());
  link->watcher = c.get();
  // A server's program that reads what is there and never sleeps on the connection
  // during its handshake (a plain client's request, answered at once) costs no
  // epoll_ctl: watch_for_sleeper or the establishment makes the watch.
  if (fresh && !client) {
    link->watch_idle.store(true);
  } else {
    link->watching.store(poller::watch(fd, kWatchHandshake, c.get()));
  }
  stats::add(stats::g.upgrades_started, 1);
  return c;
}

void drop_st(Conn* c) {
  FERRY_POLLER_ONLY();
  if (c->link->client) answered_st(c->link.get());  // answered, failed or closed
  unwatch(*c->link);
  if (!c->link->client && !c->link->established()) remember_gone_st(c);
  st().parked.erase(c);
  if (c->claimed) claims::shared()->drop(c->key, getpid());
  // The link, and with it its channel's rdma_cm id, may outlive this Conn (a socket or
  // an epoll registration still holds it): events for that id from now on (the peer's
  // DISCONNECTED) have no owner.
  if (c->link->channel) c->link->channel->id()->context = nullptr;
  if (c->parked) {
    // Let go before its first data call: a forked child may serve it (and claim it).
    if (claims::shared()) {
      hold_st(std::move(c->parked), c->parked_hello, key_of_conn(c));
    } else {
      reject_st(std::move(c->parked));
    }
  }
  if (!c->key.empty()) st().awaiting.erase(c->key);
  if (c->registered) stats::g.rdma_registered_bytes.fetch_sub(c->registered, std::memory_order_relaxed);
  auto it = st().conns.find(c->link.get());
  if (it == st().conns.end()) return;
  // Destroys ids and channels, here on the poller thread, once this round is over.
  st().dropped.push_back(std::move(it->second));
  st().conns.erase(it);
}

// A server connection the program let go before the poller took it up (Link::launch):
// what its start and drop would have left behind, the note that it went. A request
// that came for it first is refused, unless another process of the tree may serve it
// (then it stays held, as drop_st would hold it again).
void let_go_st(std::unique_ptr<Conn> c) {
  FERRY_POLLER_ONLY();
  unwatch(*c->link);
  if (!claims::shared()) {
    st().held.take_if([&](const std::string& key, Held& h) {
      if (key != c->key) return false;
      reject_st(std::move(h.id));
      return true;
    });
  }
  remember_gone_st(c.get());
  st().dropped.push_back(std::move(c));  // a watch's event may still name it this round
}

void reject_st(rdma::CmId id) {
  FERRY_POLLER_ONLY();
  if (id) rdma_reject(id.get(), nullptr, 0);
}

// The upgrade is off: the connection stays on TCP.
void fail_st(Conn* c, std::atomic<uint64_t>& reason, const char* why) {
  FERRY_POLLER_ONLY();
  if (settled_at_client_st(c)) return;
  if (!c->closed) stats::add(reason, 1);  // a closed one was never the program's to keep
  FERRY_LOG(debug, "upgrade", "%s port %u -> %u %s: %s", c->link->client ? "client" : "server", c->local_port,
            c->peer_port, c->closed ? "was closed; its answer" : "stays on TCP", why);
  if (c->link->transition(ConnState::handshake, ConnState::failed))
    if (SocketRef s = c->link->socket.lock()) {
      s->kernel_for_good.store(true, std::memory_order_release);
      conn_report::why(s->report, reason);
    }
  c->link->signal.bump();
  if (c->pending) rdma_disconnect(c->pending->id());
  drop_st(c);
}

void established_st(Conn* c) {
  FERRY_POLLER_ONLY();
  SocketRef s = c->link->socket.lock();
  if (!s) return;  // released meanwhile; retire() cleans up
  c->registered = c->pending->registered_bytes();
  stats::add(stats::g.rdma_registered_bytes, c->registered);
  conn_report::registered(s->report, c->registered, c->pending->qp_num());
  c->link->channel = std::move(c->pending);
  st().live.insert(c->link.get());
  schedule_probe_st();
  if (!c->link->transition(ConnState::handshake, ConnState::established)) {
    FERRY_LOG(warn, "upgrade", "established out of its handshake (%s)", to_string(c->link->state()));
    return;
  }
  watch_now(*c->link);  // every TCP arrival counts from now on (edges, the peer's cutover)
  signals::arm(flush_at_signal);
  FERRY_LOG(debug, "upgrade", "%s port %u -> %u on RDMA", c->link->client ? "client" : "server", c->local_port, c->peer_port);
  send_side::cut_over_soon(c->link, *s);
  c->link->signal.bump();
}

// Why a channel could not be built or activated: resources, or a handshake the peer
// abandoned meanwhile (a short-lived connection closed during its upgrade).
std::atomic<uint64_t>& reason_of(const std::string& why) {
  return Channel::handshake_gone(why) ? stats::g.tcp_timeout : stats::g.tcp_resources;
}

std::unique_ptr<Channel> build_channel_st(Conn* c, rdma::CmId id, uint64_t ring_size, std::string& why) {
  FERRY_POLLER_ONLY();
  std::string dwhy;
  rdma::Device* d = rdma::device_for(id->verbs, dwhy);
  if (!d) {
    why = dwhy;
    return nullptr;
  }
  poller::watch_device_st(d);
  return Channel::create(std::move(id), ring_size, why, &c->link->signal);
}

void adopt_st(std::unique_ptr<Conn> conn) {
  FERRY_POLLER_ONLY();
  Conn* c = conn.get();
  c->adopted = true;
  st().conns[c->link.get()] = std::move(conn);
}

// Hands a handshake to the poller: a client resolves its route at once; a server waits
// for the request, and claims the connection if another process's listener receives it
// and the program already made its first data call (a reclaimed one always has). A
// connection accepted on our own listener is posted, not submitted: the poller takes
// it up at its next round, which comes with the request, the connection's first bytes
// or the program's need (a first data call that has to tell it, a sleeper), each
// handed over after it.
void launch(std::unique_ptr<Conn> conn) {
  const bool now = conn->link->client || conn->foreign;
  if (!now) conn->link->launch.store(Link::posted);
  auto start = [c = conn.release()] {
    std::unique_ptr<Conn> owned(c);
    uint8_t was = Link::posted;
    if (!c->link->launch.compare_exchange_strong(was, Link::taken) && was == Link::let_go)
      return let_go_st(std::move(owned));
    adopt_st(std::move(owned));
    if (c->link->client) return start_client_st(c);
    start_server_st(c);
    arm_deadline_st(c);  // bytes seen before (Link::spoke_ns; peer_spoke left it here)
    if (c->foreign && c->link->arm.load() == Link::go) claim_st(c);
  };
  // A request held for this connection (accepted after the request came) waits for
  // it: g_requests_held wakes the poller then.
  now ? poller::submit(std::move(start)) : poller::post(std::move(start), &g_requests_held);
}

// Either side of a fresh connection: the handshake starts in the background unless
// the peer is loopback or the process has no RDMA. `fresh`: accept() has just returned
// it.
void start(int fd, const SocketRef& s, bool client, bool foreign, bool fresh) noexcept {
  // Without RDMA, no system call: a process that cannot upgrade pays nothing per
  // connection (so its loopback connections count here too), and lists none in
  // `ferry ss`.
  if (!rdma::some_device_allowed(config().devices)) {  // before the poller: rdma-core stays unloaded
    stats::add(stats::g.tcp_device_excluded, 1);
    return;
  }
  if (poller::unavailable() || !rdma_lib::host_has_rdma()) {
    stats::add(stats::g.tcp_no_rdma, 1);
    return;
  }
  if (!s->report) s->report = conn_report::take(fd, client ? conn_report::kClient : conn_report::kServer);
  // Kept on kernel TCP for the reason `counter` counts.
  const auto keep = [&s](std::atomic<uint64_t>& counter) {
    stats::add(counter, 1);
    conn_report::why(s->report, counter);
  };
  sockaddr_storage local, peer;
  if (!addresses(fd, local, peer)) return;
  // Loopback never leaves the host's kernel (either end, so also a client bound to an
  // outside address connecting to 127.0.0.1): it starts no poller and loads no rdma-core.
  if (is_loopback(reinterpret_cast<sockaddr*>(&peer)) || is_loopback(reinterpret_cast<sockaddr*>(&local)))
    return conn_report::why(s->report, conn_report::kWhyLoopback);
  const rules::Rule* rule = nullptr;
  if (std::atomic<uint64_t>* counter = kept_on_tcp(client, local, peer, rule)) return keep(*counter);
  // Before the poller: a server the user's processes know to run no ferry costs a new
  // process no rdma-core (core/conn/refusals.h).
  if (client && refusals::refused_lately(peer)) return keep(stats::g.tcp_peer_refused);
  if (!rdma_ready()) return keep(stats::g.tcp_no_rdma);
  auto conn = begin(fd, s, client, local, peer, fresh);
  if (!conn) return;
  if (rule && rule->ring_size) conn->ring_size = rule->ring_size;
  if (!client) conn->key = key_of_conn(conn.get());
  conn->foreign = foreign;
  if (foreign) conn->link->arm_awaited.store(true);  // its first data call makes the claim
  launch(std::move(conn));
}

}  // namespace detail

using namespace detail;

void client_connected(int fd, const SocketRef& s) noexcept { start(fd, s, true, false, false); }

void server_listening(int fd, const SocketRef& s) noexcept {
  if (!rdma::some_device_allowed(config().devices) || poller::unavailable() || !rdma_lib::host_has_rdma()) return;
  sockaddr_storage local;
  socklen_t len = sizeof local;
  if (real.getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return;
  // A listener on a loopback address only ever accepts loopback connections, which stay
  // on TCP: it needs no rdma_cm listener, and the process maps no rdma-core for it (a
  // server that forks per connection would pay for those mappings in every child).
  if (is_loopback(reinterpret_cast<const sockaddr*>(&local))) return;
  // Rules keep every connection it accepts on TCP: no rdma_cm listener either, so
  // clients under ferry learn at once that nothing listens there.
  if (!rules::listener_may_upgrade(rules::active(), rules::program_name(), rules::program_path(), local)) return;
  if (!rdma_ready()) return;
  int reuse = 0;
  socklen_t optlen = sizeof reuse;
  const bool reuseport = real.getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &optlen) == 0 && reuse;
  // Before any fork: the processes this one forks to serve its connections share it
  // (and, for a reuseport listener, the other processes of its user: core/conn/claims.h).
  claims::make_shared(reuseport);
  s->listening_pid.store(getpid());
  const Socket* key = s.get();
  std::weak_ptr<Socket> weak = s;
  // Returns once rdma_cm listens too: a program may tell its client the port as soon as
  // listen() returns (qperf, FTP's passive mode), and a request that came before the
  // rdma_cm listener would be rejected, the connection kept on TCP.
  poller::run([local, key, weak, reuseport] {
    auto l = std::make_unique<Listener>();
    l->port = port_of(reinterpret_cast<const sockaddr*>(&local));
    l->socket = key;
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(poller::cm_channel(), &raw, l.get(), RDMA_PS_TCP) != 0) return;
    l->id.reset(raw);
    sockaddr_storage addr = local;
    unmap(addr);
    if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&addr)) != 0 || rdma_listen(raw, 1024) != 0) {
      const int err = errno;
      if (reuseport && err == EADDRINUSE && claims::shared()) {
        // Another listener of the reuseport group holds the rdma_cm port: it receives
        // the requests for this one's connections and redirects them here once they
        // are claimed.
        if (SocketRef held = weak.lock()) held->listening_pid.store(Socket::kListenerElsewhere);
        FERRY_LOG(debug, "upgrade", "port %u: another process's reuseport listener takes its requests", l->port);
        return;
      }
      // Someone else holds the port in rdma_cm's port space (any user may bind one): it
      // cannot carry this listener's connections (core/conn/binding.h), which stay on TCP.
      FERRY_LOG(warn, "upgrade",
                "port %u: no rdma_cm listener (%s): its connections stay on TCP. %s", l->port, strerror(err),
                err == EADDRINUSE ? "Another program holds the port in rdma_cm's port space (see `ss`-like "
                                    "`rdma resource show cm_id`); stop it, or listen on another port."
                                  : "");
      return;
    }
    FERRY_LOG(debug, "upgrade", "rdma_cm listening on port %u", l->port);
    st().listeners[key] = std::move(l);
  }, window());
}

void server_accepted(int fd, const SocketRef& s, bool foreign) noexcept { start(fd, s, false, foreign, true); }

bool forgo(Socket& s) noexcept {
  if (!s.link || s.link->arm.load() != Link::undecided || !s.link->transition(ConnState::handshake, ConnState::failed))
    return false;
  // The poller's side of it (a request held for the first data call) times out.
  s.kernel_for_good.store(true, std::memory_order_release);
  s.link->signal.bump();
  return true;
}

void before_fork() noexcept { g_spare.make(); }

void after_fork_child() noexcept {
  // The parent's connections and listeners are the parent's business.
  g_state = g_spare.take();
  g_requests_held.store(false, std::memory_order_relaxed);
  if (Link::alive() == 0) return;
  fd_table().for_each([](int, const SocketRef& s) {
    if (!s->link) return;
    s->link->inherited = true;
    s->link->watching.store(false);  // the parent's poller watches it, not ours
    s->link->unwatched = true;
    if (s->transport() == Transport::upgrading && s->link->arm.load() == Link::undecided &&
        s->link->state() == ConnState::handshake) {
      // Never used by the parent: the child's first data call upgrades it (reclaim()).
      s->link->reclaimable = true;
    } else if (s->link->owner) {
      // On the parent's hand-over board: the child's first use asks for it.
      s->link->orphaned = true;
    } else if (s->link->transition(ConnState::handshake, ConnState::failed)) {
      // Committed by the parent and not established: TCP here.
    } else if (s->transport() == Transport::rdma) {
      s->link->orphaned = true;
    }
  });
}

void closing(int fd, Socket& s, bool last) noexcept {
  if (!s.link) return;
  if (s.link->fd == fd) unwatch(*s.link);
  // Going back to TCP: the backlog must outlive the program's descriptors. So must a
  // client's bytes held for a server that has not answered its proof yet
  // (core/conn/binding.h): they go over TCP if it never does. So must a server's socket
  // while its client may yet prove itself: its Welcome is out and no proof came.
  // Closed with the proof unread, or before it arrives, the kernel would reset TCP
  // under a client still reading the server's last bytes. The poller takes the proof
  // from the duplicate (upgrade's retire_st). A Welcome not out now never goes.
  Link& l = *s.link;
  bool answered;
  {
    std::lock_guard<Lock> w(l.watch_mu);
    if (last || l.fd == fd) l.closed = true;
    answered = l.answered.load();
  }
  const bool rdma = s.transport() == Transport::rdma;
  const bool unproven = !l.inherited && l.established() && !l.channel->trusted();
  const bool proof_may_come = !l.client && !l.forged.load() && s.linger_s.load() != 0 &&
                              (l.established() ? unproven : answered);
  if (!l.inherited && ((!l.down() && proof_may_come) || (rdma && (l.down() || (l.client && unproven)))))
    downgrade::prepare(fd, l);
  // A proof still due goes now, while fd is the program's socket (core/conn/binding.h).
  if (last && s.link->proof_due.load() && !s.link->down()) {
    std::lock_guard<Lock> tx(s.tx_mu);
    send_side::write_proof(fd, *s.link, true);
  }
  if (last) send_side::abort_if_unread(fd, s);
}

void release(Socket& s) noexcept {
  const Socket* key = &s;
  if (s.role() == Role::listener) {
    // Only the process that listened has an rdma_cm listener for it.
    if (s.listening_pid.load() != getpid() || !rdma_ready()) return;
    // Requests for connections accepted just before the close may still be on their
    // way: the rdma_cm listener stays for one upgrade window.
    poller::submit([key] {
      auto it = st().listeners.find(key);
      if (it == st().listeners.end()) return;
      std::shared_ptr<Listener> l(std::move(it->second));
      st().listeners.erase(it);
      poller::at_st(Clock::now() + window(), [l] {});
    });
    return;
  }
  std::shared_ptr<Link> link = s.link;
  if (!link || link->inherited) return;  // a forked child's copy: the parent's business
  // Not taken up by the poller yet: its launch finds it let go, and nothing is posted.
  uint8_t posted = Link::posted;
  if (link->launch.load(std::memory_order_relaxed) == posted && link->launch.compare_exchange_strong(posted, Link::let_go))
    return;
  if (link->down()) {
    downgrade::released(*link);
  } else if (link->established()) {
    std::lock_guard<Lock> tx(s.tx_mu);
    send_side::end(-1, s, *link, s.linger_s.load() == 0);
    std::lock_guard<Lock> lock(link->channel->mu());
    link->channel->flush_locked();
  } else if (!link->client && s.linger_s.load() != 0 && !link->fin_sent.exchange(true)) {
    std::lock_guard<Lock> tx(s.tx_mu);
    send_side::end_through_dup(*link);
  }
  // A connection that never had a channel leaves only the poller's table entry.
  auto retire = [link, now = Clock::now()] { retire_st(link, now); };
  link->established() ? poller::submit(std::move(retire)) : poller::post(std::move(retire));
}

void end_of_batch_st() {
  FERRY_POLLER_ONLY();
  st().dropped.clear();
  // Before the poller's fenced look at its queue, ahead of any sleep (poller::post).
  const bool held = !st().held.empty();
  if (g_requests_held.load(std::memory_order_relaxed) != held) g_requests_held.store(held, std::memory_order_relaxed);
}

void channel_barrier() noexcept {
  // On the poller thread, or on a thread that holds it between rounds (poller::move_fd).
  for (Link* l : st().live) {
    l->channel->mu().lock();
    l->channel->mu().unlock();
  }
}

void on_cm_event_st(rdma_cm_event* ev) {
  FERRY_POLLER_ONLY();
  // Copy what is needed, then acknowledge: an id can only be destroyed once its
  // events are acknowledged.
  rdma_cm_event_type type = ev->event;
  const int status = ev->status;
  rdma_cm_id* id = ev->id;
  Endpoint* owner = static_cast<Endpoint*>(id ? id->context : nullptr);
  Endpoint* listen_owner = static_cast<Endpoint*>(ev->listen_id ? ev->listen_id->context : nullptr);
  uint8_t data[256];
  uint8_t len = ev->param.conn.private_data_len;
  if (ev->param.conn.private_data && len) memcpy(data, ev->param.conn.private_data, len);
  rdma_ack_cm_event(ev);

  if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    if (listen_owner && listen_owner->kind == Endpoint::Kind::listener) {
      on_request_st(id, static_cast<Listener*>(listen_owner), data, len);
    } else {
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
    }
    return;
  }
  if (!owner || owner->kind != Endpoint::Kind::conn) return;
  auto* c = static_cast<Conn*>(owner);
  if (type == RDMA_CM_EVENT_DISCONNECTED) {
    c->link->peer_gone.store(true);
    c->link->signal.bump();
    return;
  }
  if (c->link->state() != ConnState::handshake) return;
  if (c->link->client) {
    on_client_event_st(c, type, status, data, len);
  } else {
    on_server_event_st(c, type);
  }
}

}  // namespace ferry::upgrade
