// One upgraded connection's RDMA side: an RC queue pair, the receive ring the peer
// writes into, a send staging area mirroring the peer's ring, and small buffers for
// control messages. It moves bytes and control messages; it knows nothing of sockets.
//
// Threading: every *_locked function needs mu() held (FERRY_HELD checks it in builds
// with FERRY_CHECKS, core/base/contract.h). Whoever holds it may poll the CQ
// (poll_all_locked), so app threads can make progress inline and the poller thread covers
// the rest. Waiters watch signal(), bumped whenever poll_all_locked changed something.
//
// Data writes carry no completion for the receiver: it finds them by looking at its
// ring (records, core/proto/records.h). A receiver about to sleep tells the peer so (sleep,
// with how far it has looked); the peer answers at once with a wake if it had written
// past that, else its next writes (as many as the sleep asked) carry an immediate,
// whose completion raises the sleeper's event. A receiver that keeps polling costs the
// fabric nothing per message; one that sleeps between every few messages asks for more
// waking writes per sleep message.
//
// Completion notifications wake the poller thread, which costs a context switch per
// event; a program that is polling the CQ anyway (spinning in a call, or calling
// epoll_wait) does not need them. So after an event the poller renews the notification
// only if someone sleeps on the signal (signal().wanted()) or nobody polled the CQ
// since the previous event; otherwise the channel stays unarmed and the poller looks
// again a tick later (recheck_locked), arming it once the program stopped polling. A
// thread about to sleep arms it itself (prepare_sleep_locked).
#pragma once

#include "core/base/contract.h"
#include "core/base/lock.h"
#include "core/base/wait.h"
#include "core/conn/poller.h"
#include "core/proto/flow.h"
#include "core/proto/records.h"
#include "core/proto/ring.h"
#include "core/proto/sendq.h"
#include "core/proto/wire.h"
#include "core/rdma/rdma.h"

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

class Channel : public poller::Notified {
 public:
  static constexpr int kRecvSlots = 256;
  static constexpr int kSendDepth = 256;
  static constexpr int kSignalEvery = 32;
  static constexpr uint32_t kInlineWanted = 128;
  static_assert(kSendDepth % kSignalEvery == 0 && kSignalEvery * 2 <= kSendDepth);
  // Receive requests go back in batches of this many, so up to kRepostBatch - 1 are off
  // the queue at any time.
  static constexpr int kRepostBatch = 16;
  // Receive requests are taken only by control messages and by the writes that wake a
  // sleeping receiver (other data writes take none), and those are few: credits answer the
  // peer's own data, the others come once per stall, per sleep or per connection. A
  // peer that ran out would only be delayed (receiver-not-ready retries), never fail.
  // A sleep asks for at most kMostSleepWrites waking writes, and the next sleep is told
  // only once they all came.
  static constexpr uint32_t kMostSleepWrites = flow::kMostSleepWrites;
  static_assert(kRecvSlots >= 64 + kMostSleepWrites + kRepostBatch && kRecvSlots % kRepostBatch == 0);

  // Builds the QP (in INIT, receive requests posted) and the local ring on `id` (route
  // resolved, or a connect request), taking ownership of id. The QP is ferry's own, on
  // its own device context (see rdma::Device): rdma_connect / rdma_accept name it by
  // qp_num(), and activate() moves it to RTS. Changes are announced on `signal` (the
  // channel's own when null). Null with `why` on any failure; nothing leaks.
  static std::unique_ptr<Channel> create(rdma::CmId id, uint64_t ring_size, std::string& why,
                                         Signal* signal = nullptr);
  ~Channel();

  rdma_cm_id* id() const { return verbs_.id.get(); }
  uint32_t qp_num() const { return verbs_.qp->qp_num; }
  // Whether a failure `why` of create() or activate() means rdma_cm no longer holds the
  // connection's attributes (the peer gave up or refused meanwhile), rather than a
  // resource that ran out.
  static bool handshake_gone(const std::string& why);
  // Moves the QP to RTS with what rdma_cm negotiated: on the connecting side once the
  // peer's reply arrived (then rdma_establish), on the accepting side before rdma_accept.
  bool activate(std::string& why);
  // Moves the QP to the error state: nothing lands in our ring or is acknowledged to
  // the peer from here on, and what was is in the CQ ahead of the flushed receives.
  void stop_locked();
  wire::RingRef local_ring() const;
  // Allocates and registers the send staging area for a peer ring of up to `size`
  // bytes. Done before the connection is committed, so that nothing can fail after.
  bool prepare_staging(uint64_t size, std::string& why);
  // The peer's ring, from its Hello or Welcome; no larger than the staging area.
  bool set_peer(const wire::RingRef& peer, std::string& why);
  // Client, from the Welcome: the server writes into the first `size` bytes of our ring
  // only (both rings of a connection are the smaller end's FERRY_RING_SIZE). Before
  // anything was read; false unless size is a ring size no larger than ours.
  bool use_ring(uint64_t size, std::string& why);
  // Memory this channel registered (rings, staging area, control slots).
  uint64_t registered_bytes() const;

  // Binding (wire::Proof, docs/design.md "Binding"): until trusted(), nothing in our ring
  // is read, and on the client nothing is written into the peer's: its sends wait in
  // the send queue. Without either call a channel trusts its peer (tests). Both are
  // made while the handshake builds the channel, before another thread can see it.
  // The client: its Proof's secret, which the server must send back (Op::bound).
  void await_bound(const wire::Nonce& nonce, uint64_t secret) {
    bind_.trusted.store(false, std::memory_order_release);
    bind_.held = true;
    bind_.nonce = nonce;
    bind_.secret = secret;
  }
  // What the client writes into TCP at its cutover point.
  wire::Proof proof() const { return {bind_.nonce, bind_.secret}; }
  // The server: the nonce its Welcome carried, which the client's Proof must name.
  void await_proof(const wire::Nonce& nonce) {
    bind_.trusted.store(false, std::memory_order_release);
    bind_.nonce = nonce;
  }
  const wire::Nonce& nonce() const { return bind_.nonce; }
  // The server read the client's Proof on TCP: the channel is trusted, and the client is
  // told so (with its secret) before anything else of ours. False if it cannot go.
  bool proven_locked(uint64_t secret);
  bool trusted() const { return bind_.trusted.load(std::memory_order_acquire); }

  Lock& mu() { return mu_; }
  Signal& signal() { return *signal_; }
  ibv_cq* cq() const { return verbs_.cq.get(); }
  // Send requests posted and not yet completed; 0 means everything reached the peer.
  int sq_outstanding_locked() const { FERRY_HELD(mu_); return send_.sq_outstanding; }
  // Send requests posted since the channel began, and those of them completed.
  uint64_t posted_locked() const { FERRY_HELD(mu_); return send_.posted; }
  uint64_t completed_locked() const { FERRY_HELD(mu_); return send_.posted - static_cast<uint64_t>(send_.sq_outstanding); }
  // Asks for a completion of everything posted so far (used before teardown).
  bool flush_locked();
  // Whether requests were posted since the last signaled one: no completion will come
  // for them until flush_locked() (or a later signaled request) asks for one.
  bool unsignaled_locked() const { FERRY_HELD(mu_); return send_.unsignaled > 0; }

  // Takes up to `max` bytes from iov: into the peer's ring while it has room and
  // nothing waits before them, the rest into the send queue up to its limit (drained
  // into the ring as the peer's credits come back). Returns how many (0 when both are
  // full, after telling the peer it is blocked). Never blocks.
  size_t send_locked(const iovec* iov, int iovcnt, size_t max);
  // Bytes send_locked takes in whole now: the ring's room for one record while nothing is
  // queued, else (or if more) the send queue's room.
  size_t room_locked() const {
    FERRY_HELD(mu_);
    size_t room = send_.queue_limit > send_.queue.size() ? send_.queue_limit - send_.queue.size() : 0;
    if (send_.queue.empty() && !bind_.held && send_.peer_known && send_.ring.space() > 4 * ring::kUnit && send_.sq_outstanding + ring::kMaxRecords <= kSendDepth) {
      const uint64_t ring = std::min<uint64_t>(send_.max_record, send_.ring.space() - 4 * ring::kUnit);
      if (ring > room) room = ring;
    }
    return room;
  }
  // How many bytes the send queue may hold beyond the peer's ring (send_queue_limit).
  void set_queue_limit_locked(uint64_t bytes) { FERRY_HELD(mu_); send_.queue_limit = bytes; }
  // Bytes accepted from the program that have not been written into the peer's ring.
  size_t unsent_locked() const { FERRY_HELD(mu_); return send_.queue.size(); }
  uint64_t peer_ring_locked() const { FERRY_HELD(mu_); return send_.ring.capacity(); }
  // No more data: the fin goes once the send queue has drained into the ring (the
  // final cursor names every byte). False if the connection failed.
  bool finish_locked();
  // An abortive close (SO_LINGER {1, 0}): bytes not yet in the peer's ring are dropped
  // and no fin goes, as the kernel drops its send queue and resets; the peer learns of
  // it from its TCP socket (the reset) once the RDMA side disconnects.
  void abort_locked() {
    FERRY_HELD(mu_);
    send_.queue.pop(send_.queue.size());
    send_.fin_pending = false;
  }
  // Everything accepted was written and the fin (if asked for) posted.
  bool drained_locked() const { FERRY_HELD(mu_); return send_.queue.empty() && !send_.fin_pending; }
  // Copies up to the iov's size from the ring; `peek` leaves the bytes in place.
  size_t recv_locked(const iovec* iov, int iovcnt, bool peek);
  // Whether send_locked would take all n bytes as things stand, so that a writer need not
  // poll the CQ first (polling only frees room and brings news; the receive side and the
  // poller take care of the news). Two records at most, a footer and a unit's padding each.
  bool fits_locked(size_t n) const {
    FERRY_HELD(mu_);
    if (!send_.queue.empty() || bind_.held) return send_.queue.size() + n <= send_.queue_limit;
    return send_.peer_known && n <= send_.max_record && send_.ring.space() >= n + 4 * ring::kUnit &&
           send_.sq_outstanding + ring::kMaxRecords <= kSendDepth;
  }
  size_t readable_locked() const { FERRY_HELD(mu_); return recv_.left || !trusted() ? 0 : recv_.ring.readable(); }
  // The ring is at least half taken by what was not read: the peer may have no room to
  // send more until some is. A reader waiting for more than that (SO_RCVLOWAT, a
  // peek) is woken as a kernel's full receive queue wakes it.
  bool rx_half_full_locked() const { FERRY_HELD(mu_); return 2 * recv_.ring.cursors().readable() >= recv_.ring.cursors().capacity(); }
  // The poll_* family, each a look for what arrived (and a bump of signal() when
  // something did). poll_ring_locked: the records that landed in the ring since the
  // last look, without polling the CQ: bytes only. True when some did.
  bool poll_ring_locked();
  // Writable the way kernel TCP counts it: free space at least half of what is queued,
  // so a writer woken by it can queue a useful amount.
  // Ring and send queue count as one buffer, as the kernel's send buffer does.
  bool writable_locked() const {
    FERRY_HELD(mu_);
    const uint64_t queued = send_.ring.in_flight() + send_.queue.size(), room = (bind_.held ? 0 : send_.ring.capacity()) + send_.queue_limit;
    return send_.peer_known && queued < room && (room - queued) * 2 >= queued;
  }
  // Counters of the events edge-triggered readiness reports: bytes, end of stream or
  // failure arriving (rx), and space opening up for a writer that found the ring full (tx).
  uint32_t rx_events_locked() const { FERRY_HELD(mu_); return note_.rx_events; }
  uint32_t tx_events_locked() const { FERRY_HELD(mu_); return note_.tx_events; }
  // The peer has not reported consuming everything we sent. A peer that vanished (its
  // process killed) in that state left bytes unread, and kernel TCP would have reset
  // the connection rather than end it; a reader reports its consumption before it
  // sleeps, so a peer killed while waiting for data is seen to have read everything.
  bool peer_left_unread_locked() const { FERRY_HELD(mu_); return send_.ring.in_flight() > 0 || !send_.queue.empty(); }
  uint64_t written_locked() const { FERRY_HELD(mu_); return send_.ring.written(); }
  bool post_control_locked(wire::Op op, uint64_t value) {
    FERRY_HELD(mu_);
    return post_control_locked(wire::Control{op, value});
  }
  // `confirm`: the message's own completion is asked for, and once it comes
  // confirmed_locked() is true (the peer has it).
  bool post_control_locked(const wire::Control& c, bool confirm = false);
  bool confirmed_locked() const { FERRY_HELD(mu_); return send_.confirmed; }
  // The connection is handed to TCP (core/conn/downgrade.h): tells the peer how many payload
  // bytes were read from the ring, and reads no more from it; the peer resends the rest
  // over TCP. handed_off_locked() once the peer has the message. False if it cannot go.
  bool hand_off_locked();
  bool handed_off_locked() const { FERRY_HELD(mu_); return send_.handoff_confirmed; }
  // The peer handed the connection to TCP, having read peer_handoff_read() payload
  // bytes of ours from its ring.
  bool peer_handoff() const { return recv_.peer_handoff; }
  uint64_t peer_handoff_read() const { return recv_.peer_handoff_read; }

  // What a downgrade needs (core/conn/downgrade.h). Payload bytes taken into the peer's ring and
  // read out of ours since the connection was upgraded:
  uint64_t payload_written_locked() const { FERRY_HELD(mu_); return send_.payload_written; }
  uint64_t payload_read_locked() const { FERRY_HELD(mu_); return recv_.payload_read; }
  uint64_t ring_size() const { return verbs_.rx_size; }
  // Appends to `out` the payload of every record the peer has not credited (read back
  // from the staging area), then the send queue, which is emptied; no more bytes go
  // into the ring after this. Returns how many of them were the ring's, or -1 when
  // the staging area does not hold whole records there.
  int64_t take_unacked_locked(std::vector<uint8_t>& out);
  // The same without keeping anything: nobody will read it (the peer is gone, or the
  // connection resets).
  void leave_locked();

  // The CQ (credits, control messages, send completions) and then the ring. True when
  // something changed.
  bool poll_all_locked();
  // A spinning waiter's look: the ring every time, the CQ one look in kCqEvery (what it
  // brings, credits, control messages and send completions, can wait a few looks; ring
  // bytes are what waiters mostly wait for) and every look until the peer's cutover is
  // known (ring bytes come after it). True when something changed.
  bool poll_spinning_locked();
  // Called by a thread about to sleep on signal(): arms completion notification and
  // looks once more, so that nothing that lands from here on goes unnoticed.
  void prepare_sleep_locked();
  // The poller's handling of a completion event. True when the channel was left
  // unarmed because the program is polling it: recheck_locked() it a tick later.
  bool on_notified_locked();
  // poller::Notified: the two above, under the channel's lock.
  bool on_notified_now_st() noexcept override {
    FERRY_POLLER_ONLY();
    note_.known_to_poller = true;
    std::lock_guard<Lock> lock(mu_);
    return on_notified_locked();
  }
  bool on_recheck_st() noexcept override {
    FERRY_POLLER_ONLY();
    std::lock_guard<Lock> lock(mu_);
    return recheck_locked();
  }
  // The poller's later look at an unarmed channel: arms it if nobody polled it since
  // the last look. True while it should be looked at again.
  bool recheck_locked();
  // The poller's periodic tick (flow::Prober): an empty write to a peer that returned
  // no credit for a whole tick while bytes wait for room.
  void probe_locked();

  // What the peer told us (valid under mu).
  bool peer_cutover_known() const { return recv_.peer_cutover_known; }
  uint64_t peer_cutover() const { return recv_.peer_cutover; }
  bool peer_fin() const { return recv_.peer_fin && trusted(); }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  void fail_locked(const std::string& why);


 private:
  Channel() = default;
  void repost_locked(int slot);
  bool flush_reposts_locked();
  bool post_records_locked(const ring::Record* r, int n);
  // A control message; a non-zero `tag` asks for its completion, which sets that tag's flag.
  bool post_tagged_locked(const wire::Control& c, uint64_t tag);
  size_t write_locked(const iovec* iov, int iovcnt, size_t max);
  void drain_locked();
  bool reserve_sq_locked(int wrs);
  uint32_t signal_flag_locked(int wrs);
  void handle_control_locked(const wire::Control& c);
  bool take_ring_records_locked();
  void arm_locked();
  void arm_and_poll_locked();
  void give_credit_locked();
  void pin(uint64_t bytes);

  // The verbs objects, in the order they are made; destroyed the other way (the QP
  // first, the protection domain last).
  struct Verbs {
    rdma::Device* device = nullptr;
    rdma::Pd pd;  // the connection's own (create()); outlives everything registered in it
    uint64_t pinned = 0;
    rdma::Buffer rx_buf, tx_buf, ctl_recv_buf, ctl_send_buf;
    uint64_t rx_size = 0;
    rdma::Mr rx_mr, tx_mr, ctl_recv_mr, ctl_send_mr;
    rdma::Cq cq;
    rdma::CmId id;
    rdma::Qp qp;  // declared last: destroyed first
  };
  // The sending half: the peer's ring as we see it (our writes, its credits), the send
  // queue behind it, and the send queue pair's requests.
  struct Send {
    ring::TxWindow ring{ring::kMinCapacity};
    bool peer_known = false;
    uint64_t peer_addr = 0;
    uint32_t peer_rkey = 0;
    uint64_t max_record = 0;  // payload bytes per record: a quarter of the peer's ring
    uint32_t max_inline = 0;
    int sq_outstanding = 0;
    uint64_t posted = 0;  // every request posted, for completed_locked()
    int unsignaled = 0;
    int ctl_next = 0;
    // Our side of the flow-control conversation (credits, blocked, sleep and wake:
    // core/proto/flow.h), and the tick that probes a silent peer.
    flow::Sender flow;
    flow::Prober prober;
    bool starved = false;
    // Bytes the ring had no room for yet, and how many it may hold.
    SendQueue queue;
    uint64_t queue_limit = 0;
    bool fin_pending = false;        // finish_locked() waits for the queue to drain
    bool confirmed = false;          // a confirm message's completion came
    bool handoff_confirmed = false;  // the hand-off message's completion came
    bool left = false;               // take_unacked_locked() ran: the ring takes no more
    uint64_t payload_written = 0;
    bool writing = false;  // inside write_locked: the ring's next records are being planned
  };
  // The receiving half: our ring, the receive requests, what the peer told us.
  struct Recv {
    ring::RecordRing ring{nullptr, ring::kMinCapacity};
    int repost[kRepostBatch] = {};
    int repost_n = 0;
    flow::Receiver flow;
    bool peer_cutover_known = false;
    uint64_t peer_cutover = 0;
    bool peer_fin = false;
    bool left = false;  // hand_off_locked() ran: the ring is read no more
    bool peer_handoff = false;
    uint64_t peer_handoff_read = 0;
    uint64_t payload_read = 0;
  };
  // Completion notification: whether it is armed, who polled since, and the counters of
  // what edge-triggered readiness reports.
  struct Notify {
    bool armed = false;  // a completion will raise an event
    // The poller handled a notification of it, so may hold it among its unarmed ones:
    // such a channel is destroyed on the poller thread, which forgets it there. Poller only.
    bool known_to_poller = false;
    uint64_t polls = 0;  // poll_all_locked and poll_ring_locked calls, by anyone
    uint32_t looks = 0;  // poll_spinning_locked calls
    uint64_t polls_seen = 0, polls_at_event = ~uint64_t{0};
    uint32_t rx_events = 0, tx_events = 0;
  };
  // Binding: see await_bound / await_proof.
  struct Bind {
    std::atomic<bool> trusted{true};
    bool held = false;
    uint64_t secret = 0;
    wire::Nonce nonce{};
  };

  Lock mu_;
  Signal own_signal_;
  Signal* signal_ = &own_signal_;
  Verbs verbs_;
  Recv recv_;
  Send send_;
  Notify note_;
  std::string error_;
  Bind bind_;
};

}  // namespace ferry
