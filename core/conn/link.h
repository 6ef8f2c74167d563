// The RDMA side of one TCP connection: handshake progress, the Channel once
// established, and the byte counts that define the cutover point.
#pragma once

#include "core/base/conn_report.h"
#include "core/base/fork_path.h"
#include "core/base/lock.h"
#include "core/base/wait.h"
#include "core/conn/channel.h"
#include "core/conn/poller.h"
#include "core/proto/conn_state.h"
#include "core/proto/tcp_resume.h"

#include <atomic>
#include <memory>
#include <vector>

namespace ferry {

class Socket;

struct Link;

namespace handoff {
struct Owner;
}

// A connection going back to kernel TCP (core/conn/downgrade.h), under Link::down_mu.
struct DownState final : poller::Watcher {
  Link* link = nullptr;
  // ferry's own duplicate of the TCP socket: the poller writes the backlog through it
  // while the program is elsewhere, or after it closed its descriptor. -1 once closed.
  std::atomic<int> fd{-1};
  bool fd_closing = false;
  enum class Tx : uint8_t {
    waiting,  // the peer has not yet confirmed our cutover: try again at its completion
    writing,  // the backlog (header, resent records, send queue) goes out first
    done,     // new sends go straight to the kernel
    broken,   // the connection cannot go on: sends fail as on a dead connection
  } tx = Tx::waiting;
  std::vector<uint8_t> backlog;
  size_t at = 0;
  bool fin = false;  // the program ended its sending side: shutdown(SHUT_WR) after the backlog
  // The backlog is the header alone: it goes out with the program's next send (or its
  // fin, or a hand-off), not before, so that a peer whose process died gets nothing of
  // ours before the program's first send, as with kernel TCP.
  bool lazy = false;
  int tx_error = 0;
  enum class Rx : uint8_t {
    ring,    // bytes TCP carried before the peer's cutover, then the ring's, until it is empty
    resume,  // the peer's header and the overlap already read, on TCP
    plain,   // the kernel's bytes are the program's
    ended,   // TCP ended before the header: `verdict` is every receive's answer
  } rx = Rx::ring;
  tcp_resume::Resume resume{0, 0};
  long verdict = 0;

  // The poller saw the TCP socket readable or writable: the backlog moves on.
  void on_event_st(uint32_t events) override;
};

// The poller's watch on the program's TCP socket.
struct LinkWatch {
  // The program's descriptor the poller watches for TCP data and hangups. Whoever
  // flips `watching` off removes the watch (the program's close does, before the
  // number can be reused).
  int fd = -1;
  std::atomic<bool> watching{false};
  // Orders the making or re-arming of the watch (upgrade::watch_now) with its removal by
  // the program's close: a watch is made or re-armed only while `unwatched` is not
  // set, so never on a number the program closed and may have reused.
  Lock watch_mu;
  // While the handshake runs the watch is one-shot (a server's first TCP bytes start
  // its wait for the request; an epoll server's every request would otherwise wake the
  // poller): the poller sets this when an event disarmed it, and a thread about to
  // sleep on `signal` has it re-armed (upgrade::watch_for_sleeper).
  std::atomic<bool> watch_idle{false};
  // A connection accept() returned is watched only once a thread is about to sleep on
  // it or the poller needs its arrivals (its establishment): until then it starts
  // `watch_idle`, with the watch not there yet. `watcher` is what the watch reports
  // to (the poller's Conn, alive while `unwatched` is not set). Under watch_mu:
  // `unwatched` is set for good once the program let go of fd or the poller of the
  // connection, and no watch is made after that.
  poller::Watcher* watcher = nullptr;
  bool unwatched = false;
  // A send before the cutover waits for room in TCP (stream's wait_tcp_room): the
  // one-shot handshake watch looks for room too while it is set (always looking would
  // wake every sleeper at each re-arm, TCP having room most of the time). The poller
  // clears it when room came.
  std::atomic<bool> tcp_send_wait{false};
  // Under watch_mu: the program closed the socket (its last descriptor, or the one
  // watched). A server's Welcome goes only before (`answered` is set under watch_mu):
  // the close then knows whether its client's proof may still come (upgrade::closing).
  bool closed = false;
};

// How far the handshake has come at each end: the server's wait for its request,
// and the commit at the first data call.
struct LinkHandshake {
  // Server: when the peer's first TCP bytes were seen (steady clock, ns; 0: not yet),
  // by the poller's watch or by the program's read (epoll reports no bytes the program
  // took before the poller looked): the wait for its request is limited from then on
  // (upgrade::peer_spoke).
  std::atomic<int64_t> spoke_ns{0};
  // Server: a connection accept() returned reaches the poller by a post, which the
  // poller's next round takes (`posted` until then). One the program lets go first
  // (`let_go`) costs the poller no more than a note that it went: no post at its
  // close, no table entries. Any other connection is `taken` from the start.
  enum Launch : uint8_t { taken, posted, let_go };
  std::atomic<uint8_t> launch{taken};
  // Server: the poller has armed that limit (upgrade::arm_deadline_st).
  std::atomic<bool> limit_armed{false};

  // Each side commits at the program's first data call on the connection: a connection
  // that never carries data costs no queue pair, and a connection handed to a forked
  // child (which keeps it on TCP) is never committed by the parent.
  enum Arm : int { undecided = 0, go = 1 };
  std::atomic<int> arm{undecided};
  // A server's poller waits for that first data call (a request it holds for it, or a
  // claim to make for a connection accepted on another process's listener): the call
  // tells the poller only then. Set before the poller's look at `arm`, read after the
  // call's swap of it (both sequentially consistent: one of them sees the other).
  std::atomic<bool> arm_awaited{false};
};

// What kernel TCP carried and how the program's calls left it: the cutover point
// counts these.
struct LinkTcp {
  // Written under Socket::tx_mu; readiness reads them without it.
  uint64_t tcp_sent = 0;
  bool tx_cut = false;
  // The program shut the sending side (shutdown, close): later sends fail. The fin
  // itself goes once the send queue drained (Channel::finish_locked).
  std::atomic<bool> fin_sent{false};
  // Written under Socket::rx_mu; readiness reads them without it.
  std::atomic<uint64_t> tcp_received{0};
  std::atomic<bool> rd_shut{false};
  // The socket's SO_RCVLOWAT (Socket::rcvlowat), for readiness, which has only the
  // link: copied once the socket's transport left `kernel`, and by every later set.
  std::atomic<int32_t> rcvlowat{1};
  // TCP arrivals the poller's watch saw (edge-triggered readiness counts them as new data).
  std::atomic<uint32_t> tcp_events{0};
  // tcp_events as of the last look for the peer's bytes past its cutover (downgrade.h).
  std::atomic<uint32_t> tcp_checked{0};
};

// A link as a forked child sees it (core/conn/handoff.h).
struct LinkInheritance {
  // A forked child's copy of its parent's link. Its RDMA objects are the parent's and
  // are never touched here: polling the CQ would take the parent's completions (rxe's
  // queues are memory shared with the kernel), and destroying anything through the
  // inherited device descriptor would destroy the parent's. The copy is leaked.
  std::atomic<bool> inherited{false};
  // Inherited before the parent's first data call (no RDMA object built yet): the
  // child's own first data call starts the upgrade afresh (fork-after-accept servers).
  bool reclaimable = false;
  // Inherited while on RDMA: the child asks the owner to hand it to TCP at its first
  // use (core/conn/handoff.h); unusable (ECONNRESET / EPIPE) if the owner cannot.
  bool orphaned = false;
  // On the hand-over board of the process that owns the channel, put there when it
  // forked while the link was upgraded (core/conn/handoff.h): slot and serial. `owner` is
  // that process's record, leaked, so it is valid in every descendant too.
  handoff::Owner* owner = nullptr;
  int board_slot = -1;
  uint64_t board_id = 0;
};

// Binding the RDMA side to the TCP connection (core/conn/binding.h).
struct LinkBinding {
  // Binding (core/conn/binding.h). Client: its Proof, due on TCP once the server surely has
  // our cutover message (its completion came: the server then learns the cutover point
  // before it can read past it), and when it went (0: not yet). Written under
  // Socket::tx_mu (or, for `proof_due`, down_mu once the send side left the ring).
  // Server: `forged`: the RDMA side could not prove it holds the TCP connection, so TCP
  // carries everything past the peer's cutover point as it is.
  wire::Proof proof;
  std::atomic<bool> proof_due{false};
  // Server: its Welcome is out and the handshake not yet settled. Its client may already
  // have cut over and written its proof after its bytes on TCP, and the cutover point
  // is not known here until the handshake settles: receives read only the bytes before
  // where a proof may start meanwhile (welcome_nonce).
  std::atomic<bool> answered{false};
  // Server: its Welcome's nonce, written before `answered` is set. Until the cutover
  // point is known, receives take the bytes before where a proof of it starts.
  wire::Nonce welcome_nonce{};
  // Client: when its send side cut over (0: not yet). Its patience for the server's
  // bound counts from there, whether or not the proof could go yet.
  std::atomic<int64_t> cut_us{0};
  std::atomic<bool> forged{false};
};

// The way back to TCP (core/conn/downgrade.h).
struct LinkLeaving {
  // The peer's rdma_cm side disconnected (set by the poller).
  std::atomic<bool> peer_gone{false};

  // Set under the channel's lock when the send side left the ring: no cutover, no
  // byte goes into the ring from then on.
  std::atomic<bool> tx_left{false};
  // Set under the channel's lock when this end handed the connection to TCP (its
  // hand-off message posted): the ring is read no more, and no cutover follows.
  std::atomic<bool> handed_off{false};
  // Set when the program passes the connection on while it goes back to TCP for
  // another reason (failed over, or the peer went back first): nothing waits for the
  // program's next send, and once the peer's header waits on TCP the ring's unread
  // bytes are left to the peer's resend.
  std::atomic<bool> leaving{false};
  // Serializes the downgrade's steps; taken before the channel's lock, never held
  // while sleeping.
  Lock down_mu;
  std::unique_ptr<DownState> down_state;  // made at the first step, under down_mu
};

// One connection's RDMA side. Its parts, one per concern, are bases so that the
// program's calls and the poller name each field directly; each part's comment says
// which lock or thread writes what.
struct Link : LinkWatch, LinkHandshake, LinkTcp, LinkInheritance, LinkBinding, LinkLeaving {
  bool client = false;
  // Where the connection is (core/proto/conn_state.h): changed only by transition().
  ConnState state(std::memory_order o = std::memory_order_seq_cst) const noexcept { return state_.load(o); }
  // Reached establishment: `channel` is there (it may be going back to TCP since).
  bool established() const noexcept { return was_established(state(std::memory_order_acquire)); }
  // Going, or gone, back to kernel TCP (core/conn/downgrade.h).
  bool down(std::memory_order o = std::memory_order_seq_cst) const noexcept { return is_down(state(o)); }
  // The one way the state changes: iff it is `from` now. A move off the table
  // (legal_move) is a broken contract: fatal in checked builds, refused and logged in
  // others. The socket, while there, follows (its transport, transport_of).
  bool transition(ConnState from, ConnState to) noexcept;
  // Gives the socket (already `socket`) this link's transport, `upgrading`: false, and
  // the link failed, if the socket is on TCP for good or has a link already.
  bool attach(Socket& s) noexcept;
  // Bumped whenever anything a waiting thread cares about changed.
  Signal signal;
  // Set by the poller before `state` becomes established; not replaced afterwards.
  std::unique_ptr<Channel> channel;
  std::weak_ptr<Socket> socket;
  // The socket's report entry (Socket::report), for the program's calls on the socket,
  // which hold it (the poller, which may outlive it, goes through `socket`).
  conn_report::Entry* report = nullptr;

  Link() noexcept;
  ~Link();
  // Links alive in this process. While there are none, fork's handlers skip every
  // walk that looks for them.
  FERRY_FORK_PATH static long alive() noexcept;

 private:
  std::atomic<ConnState> state_{ConnState::handshake};
};

}  // namespace ferry
