// One upgraded connection's RDMA side: an RC queue pair, the receive ring the peer
// writes into, a send staging area mirroring the peer's ring, and small buffers for
// control messages. It moves bytes and control messages; it knows nothing of sockets.
//
// Threading: every *_st function needs mu() held. Whoever holds it may poll the CQ
// (progress_st), so app threads can make progress inline and the poller thread covers
// the rest. Waiters watch signal(), bumped whenever progress_st changed something.
//
// Completion notifications wake the poller thread, which costs a context switch per
// event; a program that is polling the CQ anyway (spinning in a call, or calling
// epoll_wait) does not need them. So after an event the poller renews the notification
// only if someone sleeps on the signal (signal().wanted()) or nobody polled the CQ
// since the previous event; otherwise the channel stays unarmed and the poller looks
// again a tick later (recheck_st), arming it once the program stopped polling. A
// thread about to sleep arms it itself (prepare_sleep_st).
#pragma once

#include "core/lock.h"
#include "core/rdma.h"
#include "core/ring.h"
#include "core/wait.h"
#include "core/wire.h"

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace ferry {

class Channel {
 public:
  static constexpr int kRecvSlots = 256;
  static constexpr int kSendDepth = 256;
  static constexpr int kSignalEvery = 32;
  static constexpr uint32_t kInlineWanted = 128;
  static_assert(kSendDepth % kSignalEvery == 0 && kSignalEvery * 2 <= kSendDepth);
  // Data writes whose bytes the peer has not yet reported consumed. Each holds one of
  // the peer's receive requests until the peer polls its completion, and a peer that
  // is not polling (busy elsewhere) must never run out of them: an RDMA write with no
  // receive request waiting is refused (RNR) and retried after a delay, and meanwhile
  // the whole queue pair stalls. Consumed bytes prove their completions were polled.
  // The rest of the receive requests are for control messages, which are few: credits
  // answer the peer's own data, the others are sent once per stall or per connection.
  static constexpr uint32_t kWriteWindow = 128;
  // A receiver returns its consumer cursor at least this often (in writes landed), so a
  // peer whose reader keeps up never finds its write window full.
  static constexpr uint32_t kCreditEveryWrites = kWriteWindow / 4;
  // Receive requests whose completions were taken go back in batches of this many, so
  // up to kRepostBatch - 1 are off the queue at any time.
  static constexpr int kRepostBatch = 16;
  static_assert(kWriteWindow + 32 + kRepostBatch <= kRecvSlots && (kWriteWindow & (kWriteWindow - 1)) == 0);

  // Builds the QP (in INIT, receive requests posted) and the local ring on `id` (route
  // resolved, or a connect request), taking ownership of id. The QP is ferry's own, on
  // its own device context (see rdma::Device): rdma_connect / rdma_accept name it by
  // qp_num(), and activate() moves it to RTS. Changes are announced on `signal` (the
  // channel's own when null). Null with `why` on any failure; nothing leaks.
  static std::unique_ptr<Channel> create(rdma::CmId id, uint64_t ring_size, std::string& why,
                                         Signal* signal = nullptr);
  ~Channel();

  rdma_cm_id* id() const { return id_.get(); }
  uint32_t qp_num() const { return qp_->qp_num; }
  // Whether a failure `why` of create() or activate() means rdma_cm no longer holds the
  // connection's attributes (the peer gave up or refused meanwhile), rather than a
  // resource that ran out.
  static bool handshake_gone(const std::string& why);
  // Moves the QP to RTS with what rdma_cm negotiated: on the connecting side once the
  // peer's reply arrived (then rdma_establish), on the accepting side before rdma_accept.
  bool activate(std::string& why);
  wire::RingRef local_ring() const;
  // Allocates and registers the send staging area for a peer ring of up to `size`
  // bytes. Done before the connection is committed, so that nothing can fail after.
  bool prepare_staging(uint64_t size, std::string& why);
  // The peer's ring, from its Hello or Welcome; no larger than the staging area.
  bool set_peer(const wire::RingRef& peer, std::string& why);
  uint64_t registered_bytes() const;

  Lock& mu() { return mu_; }
  Signal& signal() { return *signal_; }
  ibv_cq* cq() const { return cq_.get(); }
  // Send requests posted and not yet completed; 0 means everything reached the peer.
  int sq_outstanding_st() const { return sq_outstanding_; }
  // Asks for a completion of everything posted so far (used before teardown).
  bool flush_st();

  // Copies up to `max` bytes from iov into the peer's ring; returns how many (0 when
  // the ring is full, after telling the peer it is blocked). Never blocks.
  size_t send_st(const iovec* iov, int iovcnt, size_t max);
  // Copies up to the iov's size from the ring; `peek` leaves the bytes in place.
  size_t recv_st(const iovec* iov, int iovcnt, bool peek);
  // Whether send_st would take all n bytes as things stand, so that a writer need not
  // poll the CQ first (polling only frees room and brings news; the receive side and the
  // poller take care of the news).
  bool fits_st(size_t n) const {
    return peer_known_ && tx_.space() >= n && writes_in_flight_st() < kWriteWindow && sq_outstanding_ + 2 <= kSendDepth;
  }
  size_t readable_st() const { return rx_.readable(); }
  size_t send_space_st() const { return peer_known_ ? tx_.space() : 0; }
  // Writable the way kernel TCP counts it: free space at least half of what is queued,
  // so a writer woken by it can queue a useful amount.
  bool writable_st() const {
    return peer_known_ && tx_.space() * 2 >= tx_.in_flight() && tx_.space() > 0 && writes_in_flight_st() < kWriteWindow;
  }
  // Counters of the events edge-triggered readiness reports: bytes, end of stream or
  // failure arriving (rx), and space opening up for a writer that found the ring full (tx).
  uint32_t rx_events_st() const { return rx_events_; }
  uint32_t tx_events_st() const { return tx_events_; }
  uint64_t unacked_st() const { return tx_.in_flight(); }
  // The peer has not reported consuming everything we sent. A peer that vanished (its
  // process killed) in that state left bytes unread, and kernel TCP would have reset
  // the connection rather than end it; a reader reports its consumption before it
  // sleeps, so a peer killed while waiting for data is seen to have read everything.
  bool peer_left_unread_st() const { return tx_.in_flight() > 0; }
  uint64_t written_st() const { return tx_.written(); }
  bool post_control_st(wire::Op op, uint64_t value);

  // Polls the CQ and applies what arrived. True when something changed.
  bool progress_st();
  // Called by a thread about to sleep on signal(): arms completion notification and
  // looks once more, so that nothing that lands from here on goes unnoticed.
  void prepare_sleep_st();
  // The poller's handling of a completion event. True when the channel was left
  // unarmed because the program is polling it: recheck_st() it a tick later.
  bool on_notified_st();
  // The poller's later look at an unarmed channel: arms it if nobody polled it since
  // the last look. True while it should be looked at again.
  bool recheck_st();

  // What the peer told us (valid under mu).
  bool peer_cutover_known() const { return peer_cutover_known_; }
  uint64_t peer_cutover() const { return peer_cutover_; }
  bool peer_fin() const { return peer_fin_; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  void fail_st(const std::string& why);


 private:
  Channel() = default;
  void repost_st(int slot);
  bool flush_reposts_st();
  bool post_write_st(const ring::Span& span);
  bool reserve_sq_st(int wrs);
  uint32_t signal_flag_st(int wrs);
  void handle_control_st(const wire::Control& c);
  uint32_t writes_in_flight_st() const { return write_tail_ - write_head_; }
  void retire_writes_st(uint64_t consumed);
  void arm_st();
  void give_credit_st();

  Lock mu_;
  Signal own_signal_;
  Signal* signal_ = &own_signal_;
  rdma::Device* device_ = nullptr;

  rdma::Buffer rx_buf_, tx_buf_, ctl_recv_buf_, ctl_send_buf_;
  uint64_t rx_size_ = 0;
  rdma::Mr rx_mr_, tx_mr_, ctl_recv_mr_, ctl_send_mr_;
  rdma::Cq cq_;
  rdma::CmId id_;
  rdma::Qp qp_;  // declared last: destroyed first

  ring::RxRing rx_{ring::kMinCapacity};
  ring::TxWindow tx_{ring::kMinCapacity};
  bool peer_known_ = false;
  uint64_t peer_addr_ = 0;
  uint32_t peer_rkey_ = 0;
  uint32_t max_inline_ = 0;
  int sq_outstanding_ = 0;
  int unsignaled_ = 0;
  int ctl_next_ = 0;
  int repost_[kRepostBatch] = {};
  int repost_n_ = 0;
  bool peer_blocked_ = false;
  uint64_t blocked_sent_at_ = ~uint64_t{0};
  bool peer_cutover_known_ = false;
  uint64_t peer_cutover_ = 0;
  bool peer_fin_ = false;
  bool tx_starved_ = false;
  // Where each write in flight ends in the stream, oldest at write_head_.
  uint64_t write_ends_[kWriteWindow] = {};
  uint32_t write_head_ = 0, write_tail_ = 0;
  uint32_t writes_since_credit_ = 0;  // the peer's writes landed since our last credit
  bool armed_ = false;  // a completion will raise an event
  uint64_t polls_ = 0;  // progress_st calls, by anyone
  uint64_t polls_seen_ = 0, polls_at_event_ = ~uint64_t{0};
  uint32_t rx_events_ = 0, tx_events_ = 0;
  std::string error_;
};

}  // namespace ferry
