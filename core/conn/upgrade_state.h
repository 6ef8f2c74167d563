// What the poller keeps of the upgrades in progress: the rdma_cm endpoints (listeners
// and connections' handshakes), requests held for a connection not yet accepted, and
// the poller-thread state that indexes them, with the functions the upgrade's two
// files share. Private to the upgrade's files: core/conn/upgrade*.cpp and
// core/conn/exit_flush.cpp.
#pragma once

#include "core/base/rules.h"
#include "core/conn/claims.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/refusals.h"
#include "core/conn/socket.h"
#include "core/proto/held_queue.h"
#include "core/proto/wire.h"
#include "core/rdma/rdma.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ferry::upgrade::detail {

// What an rdma_cm id's context points at.
struct Endpoint {
  enum class Kind { listener, conn } kind;
  explicit Endpoint(Kind k) : kind(k) {}
  virtual ~Endpoint() = default;
};

struct Listener : Endpoint {
  Listener() : Endpoint(Kind::listener) {}
  rdma::CmId id;
  uint16_t port = 0;
  const Socket* socket = nullptr;
  // This process's own listener for requests the listening process redirected here
  // (core/conn/claims.h): it matches a request by the TCP ports the request names.
  bool redirect = false;
};

// One connection's handshake, poller-owned. Also watches the TCP duplicate. Its flags
// are the facts of a handshake that rdma_cm reports piecemeal, one member each: kept
// side by side so that each event's handler reads as the step it is.
struct Conn : Endpoint, poller::Watcher {
  Conn() : Endpoint(Kind::conn) {}
  std::shared_ptr<Link> link;
  rdma::CmId id;                     // until the Channel takes it
  std::unique_ptr<Channel> pending;  // built, waiting for ESTABLISHED
  std::string key;                   // server: peer ip | peer port | local port
  bool committed = false;            // connect/accept sent: only rdma_cm decides now
  bool resolved = false;             // client: route resolved, waiting for the arm
  bool waiting = false;              // client: waits for another connection's answer (Askers)
  bool alone = false;                // client: asks without waiting for another's answer
  bool closed = false;               // client: closed while its request was out; kept for the answer
  bool adopted = false;              // in State::conns (launched)
  bool foreign = false;              // server: accepted on a listener another process opened
  bool claimed = false;              // server: our claim is in the tree's table
  uint16_t redirect_port = 0;        // client: the server redirected us to this rdma_cm port
  rdma::CmId parked;                 // server: the matching request, waiting for the arm
  wire::Hello parked_hello;
  uint16_t local_port = 0, peer_port = 0;
  sockaddr_storage local{}, peer{};
  uint64_t registered = 0;
  uint64_t ring_size = 0;  // this connection's FERRY_RING_SIZE (a rule may set its own)
  // An exit's or a signal's flush (core/conn/exit_flush.cpp), as of its epoch: the payload
  // bytes the program had handed over, and the requests posted once they were written.
  struct Flush {
    uint64_t epoch = 0, bytes = 0, posted = 0;
    bool written = false;  // `bytes` are written; `posted` is their mark
    uint64_t left = 0;     // bytes to write, then requests to complete, at the last look
  } flush;

  // TCP data or a hangup on the connection.
  void on_event_st(uint32_t) override;
};

// A connect request that arrived before the program accepted its TCP connection.
struct Held {
  rdma::CmId id;
  wire::Hello hello;
};
// At most this many held at once, and this many from one peer address: a flood of
// requests naming made-up ports (anyone who reaches the port can send them) neither
// grows without bound nor crowds out the requests of other hosts.
constexpr size_t kHeldMost = 4096;
constexpr size_t kHeldPerSource = 1024;

// Poller-thread state. Never destroyed: the poller keeps running while the process
// exits and static destructors run.
struct State {
  std::map<Link*, std::unique_ptr<Conn>> conns;
  std::map<std::string, Conn*> awaiting;  // server conns waiting for their request
  HeldQueue<Held, poller::Clock::time_point> held{kHeldMost, kHeldPerSource};
  bool sweeping_held = false;  // a look for expired held requests is due
  // Server connections this process let go of before an upgrade (closed, or given up
  // on): a request naming one is refused at once, never held. A forking server (a
  // postmaster) closes its copy right after accept and leaves the connection to a
  // child, which does not answer requests; without this the client's request would be
  // held for FERRY_ACCEPT_WAIT_MS, the client's connection upgrading all that time.
  std::map<std::string, poller::Clock::time_point> gone;
  std::deque<std::pair<std::string, poller::Clock::time_point>> gone_order;  // oldest first
  std::map<const Socket*, std::unique_ptr<Listener>> listeners;
  std::vector<std::unique_ptr<Conn>> dropped;  // freed at the end of the poller's round
  std::set<Conn*> parked;  // conns holding a matched request until the program's first data call
  bool rechecking = false;  // a look at the claims for held and parked requests is due
  // Server connections' waits for their request, by their end (arm_deadline_st).
  std::multimap<poller::Clock::time_point, std::weak_ptr<Link>> deadlines;
  bool sweeping = false;  // a look at `deadlines` is due
  // Listeners for redirected requests (one per address family, made on first need).
  std::unique_ptr<Listener> redirect4, redirect6;
  std::set<Link*> live;  // links with a channel, until they are destroyed
  bool probing = false;  // a persist-probe tick is due
  refusals::Askers<Link> askers;  // clients' requests to servers not known to run ferry
  refusals::Table serving;        // servers that answered a request lately (not "nothing listens")
};

// The process's upgrade state (core/conn/upgrade.cpp; a forked child gets a fresh one).
State& st();
// FERRY_ACCEPT_WAIT_MS and FERRY_UPGRADE_TIMEOUT_MS.
std::chrono::milliseconds accept_wait();
std::chrono::milliseconds window();
inline int64_t ns_of(poller::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// core/conn/upgrade.cpp
// The upgrade is off: the connection stays on TCP (counted as `reason`).
void fail_st(Conn* c, std::atomic<uint64_t>& reason, const char* why);
void reject_st(rdma::CmId id);
// Why a channel could not be built or activated, as the counter it goes to.
std::atomic<uint64_t>& reason_of(const std::string& why);
// c's channel on the device of id (ring_size bytes of ring), watched by the poller.
std::unique_ptr<Channel> build_channel_st(Conn* c, rdma::CmId id, uint64_t ring_size, std::string& why);
// c's handshake settled: the channel is the link's, the send side cuts over.
void established_st(Conn* c);
// A server giving up on a handshake after its Welcome went: true when its client cut
// over meanwhile, and the connection then went on as established, with a failed
// channel (upgrade_server.cpp).
bool settled_at_client_st(Conn* c);

// core/conn/upgrade_client.cpp
void start_client_st(Conn* c);
// The client connects once the route is known and the program armed the upgrade.
void connect_when_armed_st(Conn* c);
// `asker`'s answer came, or it stopped asking: the connections that waited ask now.
void answered_st(const Link* asker);
void on_client_event_st(Conn* c, rdma_cm_event_type type, int status, const void* data, uint8_t len);

// core/conn/upgrade_server.cpp
void start_server_st(Conn* c);
// Answers a request with the server connection it names.
void accept_request_st(Conn* c, rdma::CmId id, const wire::Hello& h);
void on_request_st(rdma_cm_id* raw, const Listener* l, const void* data, uint8_t len);
void on_server_event_st(Conn* c, rdma_cm_event_type type);

// core/conn/upgrade_requests.cpp
// A server connection's key (endpoint::conn_key).
std::string key_of_conn(const Conn* c);
// Server connections this process let go of before an upgrade (State::gone).
void remember_gone_st(const Conn* c);
void remember_gone_key_st(std::string key);
// The process's io_uring or credentials (core/base/tcp_only.h) or the rules file
// (core/base/rules.h, tcp_rule) keeps the connection between local and peer on TCP:
// the counter that says why (for the caller to count), and a server's client is refused
// at once (its request, held or to come, finds the connection gone); null when nothing
// keeps it. `rule`: the rule that matched, if any.
std::atomic<uint64_t>* kept_on_tcp(bool client, const sockaddr_storage& local, const sockaddr_storage& peer,
                                   const rules::Rule*& rule);
bool is_gone_st(const std::string& key);
// Another process of the tree serves `key` (core/conn/claims.h); it listens on who.port.
bool claimed_elsewhere(const std::string& key, claims::Claim& who);
// Sends a request on to the process listening on rdma_cm port `port`.
void redirect_st(rdma::CmId id, uint16_t port);
// Held and parked requests are looked up in the claims every few milliseconds.
void schedule_recheck_st();
// A request nobody here can answer yet, kept for FERRY_ACCEPT_WAIT_MS.
void hold_st(rdma::CmId id, const wire::Hello& h, std::string key);
// Claims a connection accepted on another process's listener, for its request.
void claim_st(Conn* c);
// The peer of server connection c sent its first bytes (Link::spoke_ns): without a
// request within the window from then, the connection stays on TCP.
void arm_deadline_st(Conn* c);
// The poller, serving the upgrade's rdma_cm events (upgrade.cpp): started if RDMA can be
// used in this process.
bool rdma_ready();

// The poller's watch of a connection's TCP side: one-shot while the handshake runs
// (Link::watch_idle; room in TCP only while a sender waits for it, Link::tcp_send_wait),
// then every arrival and room (edge-triggered: room is an edge only after a send
// found none).
constexpr uint32_t kWatchLive = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
constexpr uint32_t kWatchHandshake = EPOLLIN | EPOLLRDHUP | EPOLLET | EPOLLONESHOT;
// Makes or re-arms the connection's watch (upgrade_watch.cpp), unless it was removed for
// good: under Link::watch_mu, fd is still the program's socket then (a close takes the
// lock before the kernel frees the number).
void watch_now(Link& link);
// Removes the watch for good (the program let go of fd, or the poller of the Conn).
void unwatch(Link& link);
// Notes the time of the peer's first bytes; true for the note that counted. Any thread.
bool note_spoke(Link& link);

// A handshake's record for a connection whose endpoints are local and peer.
std::unique_ptr<Conn> make_conn(const std::shared_ptr<Link>& link, const sockaddr_storage& local,
                                const sockaddr_storage& peer);
// Ends the handshake record of c (upgrade.cpp).
void drop_st(Conn* c);
// Once a tick while connections live: persist probes and the binding's patience
// (upgrade_upkeep.cpp).
void schedule_probe_st();
// A closed connection: flushes what it sent as the peer makes room (the peer last made
// progress at `progress`), then closes its RDMA side (upgrade_upkeep.cpp).
void retire_st(const std::shared_ptr<Link>& link, poller::Clock::time_point progress);
// Hands a handshake to the poller (upgrade.cpp).
void launch(std::unique_ptr<Conn> conn);
// Either side of a fresh connection: its handshake starts unless it cannot use RDMA
// (upgrade.cpp). `foreign`: accepted on another process's listener; `fresh`: accept()
// has just returned it.
void start(int fd, const SocketRef& s, bool client, bool foreign, bool fresh) noexcept;

}  // namespace ferry::upgrade::detail

namespace ferry::upgrade {

// The poller's User (core/conn/poller.h), on its thread: one rdma_cm event (this
// function acknowledges it).
void on_cm_event_st(rdma_cm_event* ev);
// Poller thread, after each round of events: frees connections dropped during it (an
// event for them may still be in the round's list).
void end_of_batch_st();
// Poller thread, after each round: while a thread waits in flush_at_exit or
// flush_at_signal, tells it how much is left.
void answer_flush_st();
// Takes and releases the lock of every live channel once: whoever used a descriptor
// number inside a channel call has finished (see poller::move_fd). With the poller
// held between rounds (its state stands still).
void channel_barrier() noexcept;

}  // namespace ferry::upgrade
