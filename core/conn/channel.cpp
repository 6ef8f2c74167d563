#include "core/conn/channel.h"

#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/poller.h"
#include "core/proto/downgrade.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

namespace ferry {
namespace {

constexpr uint64_t kRecvTag = uint64_t{1} << 63;
// On a send request's wr_id: its completion confirms a message (post_control_st).
constexpr uint64_t kConfirmTag = uint64_t{1} << 62;
// On a send request's wr_id: its completion confirms the hand-off message.
constexpr uint64_t kHandoffTag = uint64_t{1} << 61;
constexpr uint32_t kSlot = wire::kControlSize;
// A spinning waiter polls the CQ one look in this many (look_st).
constexpr uint32_t kCqEvery = 8;

// The longest a sender spins for send-queue room (reserve_sq_st).
constexpr std::chrono::seconds kSqPatience{10};

// Memory every channel of the process has registered now (rdma_registered_most).
std::atomic<uint64_t> g_pinned{0};

// A position in an iovec list, moved forward piece by piece.
struct IovCursor {
  const iovec* iov;
  int iovcnt;
  int v = 0;
  size_t voff = 0;
  // Hands the next n bytes of the list (fewer if it ends) to f(app, done, length), one
  // contiguous piece at a time; `done` counts the bytes handed before the piece.
  template <class F>
  void take(size_t n, F f) {
    if (iovcnt == 1 && v == 0 && voff == 0 && n > 0 && n <= iov->iov_len) {  // the usual case: one buffer, one piece
      f(static_cast<uint8_t*>(iov->iov_base), 0, n);
      voff = n;
      if (n == iov->iov_len) v = 1;
      return;
    }
    for (size_t done = 0; done < n && v < iovcnt;) {
      const size_t k = iov[v].iov_len - voff < n - done ? iov[v].iov_len - voff : n - done;
      if (k > 0) f(static_cast<uint8_t*>(iov[v].iov_base) + voff, done, k);
      done += k;
      voff += k;
      if (voff == iov[v].iov_len) {
        ++v;
        voff = 0;
      }
    }
  }
};

size_t iov_total(const iovec* iov, int iovcnt) {
  size_t t = 0;
  for (int i = 0; i < iovcnt; ++i) t += iov[i].iov_len;
  return t;
}

// An ack timeout of 4.096 us * 2^16 = 268 ms: with the 6 retries upgrade.cpp asks for,
// a queue pair whose path died fails within about two seconds.
constexpr uint8_t kAckTimeout = 16;
// Retries of a send the peer did not ack, or refused for want of a receive request.
constexpr uint8_t kMostRetries = 6;

// Moves qp to `state` with the attributes rdma_cm holds for id (port, P_Key, path,
// PSNs, timeouts, access rights once the peer is known).
constexpr char kNoAttributes[] = "rdma_init_qp_attr";

bool move_qp(rdma_cm_id* id, ibv_qp* qp, ibv_qp_state state, std::string& why) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  if (rdma_init_qp_attr(id, &attr, &mask) != 0) {
    why = std::string(kNoAttributes) + "(" + std::to_string(state) + "): " + strerror(errno);
    return false;
  }
  if (state == IBV_QPS_RTS && (attr.timeout == 0 || attr.timeout > kAckTimeout)) {
    // rdma_cm's ack timeout for RoCE is 0 (none) or long (2 s per try at 19, 17 s in
    // all): a path that dies would keep the queue pair waiting that long, or forever,
    // before it fails and the connection goes back to TCP (core/conn/down.h).
    attr.timeout = kAckTimeout;
    mask |= IBV_QP_TIMEOUT;
  }
  if (state == IBV_QPS_RTS) {
    // Our retries come from the peer's side of the handshake (a CM request or reply
    // names the counts its sender wants the other end to use), and 7 means "forever":
    // a peer that asks for that and then acks nothing, or posts no receive request,
    // would hold our sends, and the lock of whoever waits for room, for good. Ours are
    // bounded whatever it asks: about 2 s of lost acks, or 4 s of receiver-not-ready
    // (at most 655 ms each), fail the queue pair and the connection goes back to TCP.
    attr.retry_cnt = std::min<uint8_t>(attr.retry_cnt, kMostRetries);
    attr.rnr_retry = std::min<uint8_t>(attr.rnr_retry, kMostRetries);
    mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
  }
  if (int e = ibv_modify_qp(qp, &attr, mask)) {
    why = std::string("ibv_modify_qp(") + std::to_string(state) + "): " + strerror(e);
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Channel> Channel::create(rdma::CmId id, uint64_t ring_size, std::string& why,
                                         Signal* signal) {
  if (!ring::valid_capacity(ring_size)) {
    why = "ring size " + std::to_string(ring_size) + " is not a power of two in [4 KiB, 1 GiB]";
    return nullptr;
  }
  std::unique_ptr<Channel> c(new Channel);
  if (signal) c->signal_ = signal;
  c->device_ = rdma::device_for(id->verbs, why);
  if (!c->device_) return nullptr;
  // A protection domain of its own: the peer's queue pair can reach this connection's
  // ring and nothing else of the process, whatever key it tries (docs/design.md,
  // "Threat model").
  c->pd_.reset(ibv_alloc_pd(c->device_->context.get()));
  if (!c->pd_) {
    why = std::string("ibv_alloc_pd: ") + strerror(errno);
    return nullptr;
  }
  ibv_pd* pd = c->pd_.get();
  c->rx_size_ = ring_size;
  c->rx_buf_ = rdma::allocate(ring_size);
  c->ctl_recv_buf_ = rdma::allocate(kRecvSlots * kSlot);
  c->ctl_send_buf_ = rdma::allocate(kSendDepth * kSlot);
  if (!c->rx_buf_ || !c->ctl_recv_buf_ || !c->ctl_send_buf_) {
    why = "out of memory for the rings";
    return nullptr;
  }
  c->rx_ = ring::RecordRing(c->rx_buf_.get(), ring_size);
  // Only the ring accepts remote writes; control buffers are local.
  c->rx_mr_.reset(ibv_reg_mr(pd, c->rx_buf_.get(), ring_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  c->ctl_recv_mr_.reset(ibv_reg_mr(pd, c->ctl_recv_buf_.get(), kRecvSlots * kSlot, IBV_ACCESS_LOCAL_WRITE));
  c->ctl_send_mr_.reset(ibv_reg_mr(pd, c->ctl_send_buf_.get(), kSendDepth * kSlot, 0));
  if (!c->rx_mr_ || !c->ctl_recv_mr_ || !c->ctl_send_mr_) {
    why = std::string("ibv_reg_mr: ") + strerror(errno);
    return nullptr;
  }
  c->pin(ring_size + kRecvSlots * kSlot + kSendDepth * kSlot);
  FERRY_LOG(debug, "rdma", "ring of %llu bytes at %#llx, rkey %#x", static_cast<unsigned long long>(ring_size),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(c->rx_buf_.get())), c->rx_mr_->rkey);
  ibv_context* verbs = c->device_->context.get();
  c->cq_.reset(ibv_create_cq(verbs, kSendDepth + kRecvSlots + 16, static_cast<poller::Notified*>(c.get()), c->device_->events.get(), 0));
  if (!c->cq_) {
    why = std::string("ibv_create_cq: ") + strerror(errno);
    return nullptr;
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = c->cq_.get();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kSendDepth;
  attr.cap.max_recv_wr = kRecvSlots;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = kInlineWanted;
  c->qp_.reset(ibv_create_qp(pd, &attr));
  if (!c->qp_) {
    attr.cap.max_inline_data = 0;
    c->qp_.reset(ibv_create_qp(pd, &attr));
    if (!c->qp_) {
      why = std::string("ibv_create_qp: ") + strerror(errno);
      return nullptr;
    }
  }
  // Receive requests can be posted from INIT on.
  if (!move_qp(id.get(), c->qp_.get(), IBV_QPS_INIT, why)) return nullptr;
  c->max_inline_ = attr.cap.max_inline_data;
  c->id_ = std::move(id);
  static_assert(kRecvSlots % kRepostBatch == 0);
  for (int i = 0; i < kRecvSlots; ++i) {
    c->repost_[c->repost_n_++] = i;
    if (c->repost_n_ == kRepostBatch && !c->flush_reposts_st()) {
      why = std::string("ibv_post_recv: ") + strerror(errno);
      return nullptr;
    }
  }
  c->arm_st();
  return c;
}

bool Channel::handshake_gone(const std::string& why) { return why.rfind(kNoAttributes, 0) == 0; }

bool Channel::activate(std::string& why) {
  // INIT again first: only now does rdma_cm grant the remote write access.
  return move_qp(id_.get(), qp_.get(), IBV_QPS_INIT, why) && move_qp(id_.get(), qp_.get(), IBV_QPS_RTR, why) &&
         move_qp(id_.get(), qp_.get(), IBV_QPS_RTS, why);
}

// Channels that saw completion events are destroyed on the poller thread only.
Channel::~Channel() {
  poller::forget_st(this);
  g_pinned.fetch_sub(pinned_, std::memory_order_relaxed);
}

void Channel::pin(uint64_t bytes) {
  pinned_ += bytes;
  const uint64_t now = g_pinned.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t most = stats::g.rdma_registered_most.load(std::memory_order_relaxed);
  while (now > most && !stats::g.rdma_registered_most.compare_exchange_weak(most, now, std::memory_order_relaxed)) {
  }
}

bool Channel::use_ring(uint64_t size, std::string& why) {
  if (!ring::valid_capacity(size) || size > rx_mr_->length) {
    why = "the peer would use " + std::to_string(size) + " bytes of a ring of " + std::to_string(rx_mr_->length);
    return false;
  }
  rx_size_ = size;
  rx_ = ring::RecordRing(rx_buf_.get(), size);
  return true;
}

wire::RingRef Channel::local_ring() const {
  return {reinterpret_cast<uint64_t>(rx_buf_.get()), rx_mr_->rkey, rx_size_};
}

bool Channel::prepare_staging(uint64_t size, std::string& why) {
  if (!ring::valid_capacity(size)) {
    why = "ring size out of range";
    return false;
  }
  tx_buf_ = rdma::allocate(size);
  if (!tx_buf_) {
    why = "out of memory for the send staging area";
    return false;
  }
  tx_mr_.reset(ibv_reg_mr(pd_.get(), tx_buf_.get(), size, 0));
  if (!tx_mr_) {
    why = std::string("ibv_reg_mr: ") + strerror(errno);
    return false;
  }
  pin(size);
  return true;
}

bool Channel::set_peer(const wire::RingRef& peer, std::string& why) {
  if (!tx_mr_ && !prepare_staging(peer.size, why)) return false;
  if (!ring::valid_capacity(peer.size) || peer.size > tx_mr_->length) {
    why = "peer ring larger than the staging area";
    return false;
  }
  tx_ = ring::TxWindow(peer.size);
  max_record_ = peer.size / 4;
  peer_addr_ = peer.addr;
  peer_rkey_ = peer.rkey;
  peer_known_ = true;
  return true;
}

uint64_t Channel::registered_bytes() const {
  return pinned_;
}

// Receive requests go back to the queue in batches: one call for many is far cheaper
// than one each, and the few held back never starve the peer (see kRepostBatch).
void Channel::repost_st(int slot) {
  repost_[repost_n_++] = slot;
  if (repost_n_ == kRepostBatch && !flush_reposts_st()) fail_st("ibv_post_recv failed");
}

bool Channel::flush_reposts_st() {
  ibv_sge sge[kRepostBatch];
  ibv_recv_wr wr[kRepostBatch];
  for (int i = 0; i < repost_n_; ++i) {
    int slot = repost_[i];
    sge[i] = {reinterpret_cast<uint64_t>(ctl_recv_buf_.get() + slot * kSlot), kSlot, ctl_recv_mr_->lkey};
    wr[i].wr_id = kRecvTag | static_cast<uint64_t>(slot);
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < repost_n_ ? &wr[i + 1] : nullptr;
  }
  const int n = repost_n_;
  repost_n_ = 0;
  ibv_recv_wr* bad = nullptr;
  return n == 0 || ibv_post_recv(qp_.get(), wr, &bad) == 0;
}

// Send-queue room for `wrs` more work requests, polling completions while it is full.
// The queue pair's own limits (ack timeout and retries, RNR retries) fail it within
// seconds when the peer takes nothing; kSqPatience bounds the spin should they not.
bool Channel::reserve_sq_st(int wrs) {
  if (sq_outstanding_ + wrs <= kSendDepth) return true;
  const auto until = std::chrono::steady_clock::now() + kSqPatience;
  for (uint32_t n = 0; sq_outstanding_ + wrs > kSendDepth; ++n) {
    progress_st();
    if (failed()) return false;
    if (n % 1024 == 1023 && std::chrono::steady_clock::now() > until) {
      fail_st("the peer took none of our sends for " + std::to_string(kSqPatience.count()) + " s");
      return false;
    }
  }
  return true;
}

// One signaled request per kSignalEvery: its completion retires the whole batch.
uint32_t Channel::signal_flag_st(int wrs) {
  sq_outstanding_ += wrs;
  posted_ += static_cast<uint64_t>(wrs);
  unsignaled_ += wrs;
  if (unsignaled_ >= kSignalEvery) return IBV_SEND_SIGNALED;
  return 0;
}

// One write per record, posted together. The last carries an immediate when the peer
// sleeps: its completion is the peer's wake-up.
bool Channel::post_records_st(const ring::Record* r, int n) {
  if (!reserve_sq_st(n)) return false;
  ibv_sge sge[ring::kMaxRecords];
  ibv_send_wr wr[ring::kMaxRecords];
  for (int i = 0; i < n; ++i) {
    const uint64_t off = r[i].payload_offset(), len = r[i].payload + r[i].tail();
    wr[i] = {};
    sge[i] = {reinterpret_cast<uint64_t>(tx_buf_.get() + off), static_cast<uint32_t>(len), tx_mr_->lkey};
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].wr.rdma.remote_addr = peer_addr_ + off;
    wr[i].wr.rdma.rkey = peer_rkey_;
    if (len <= max_inline_) wr[i].send_flags |= IBV_SEND_INLINE;
    if (i + 1 < n) wr[i].next = &wr[i + 1];
  }
  ibv_send_wr& last = wr[n - 1];
  if (tx_flow_.next_write_wakes()) {
    last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    last.imm_data = 0;
  }
  uint32_t flag = signal_flag_st(n);
  last.send_flags |= flag;
  last.wr_id = flag ? static_cast<uint64_t>(unsignaled_) : 0;
  if (flag) unsignaled_ = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_.get(), wr, &bad) != 0) {
    fail_st(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

bool Channel::post_control_st(const wire::Control& c, bool confirm) {
  return post_tagged_st(c, confirm ? kConfirmTag : 0);
}

bool Channel::hand_off_st() {
  if (rx_left_) return true;
  if (!post_tagged_st(wire::Control{wire::Op::handoff, payload_read_}, kHandoffTag)) return false;
  rx_left_ = true;
  return true;
}

bool Channel::post_tagged_st(const wire::Control& c, uint64_t tag) {
  if (failed() || !reserve_sq_st(1)) return false;
  uint8_t* slot = ctl_send_buf_.get() + ctl_next_ * kSlot;
  ctl_next_ = (ctl_next_ + 1) % kSendDepth;
  wire::encode(c, slot);
  ibv_sge sge{reinterpret_cast<uint64_t>(slot), kSlot, ctl_send_mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  if (kSlot <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  uint32_t flag = signal_flag_st(1);
  if (tag) flag = IBV_SEND_SIGNALED;
  wr.send_flags |= flag;
  wr.wr_id = flag ? static_cast<uint64_t>(unsignaled_) | tag : 0;
  if (flag) unsignaled_ = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_.get(), &wr, &bad) != 0) {
    fail_st(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

size_t Channel::send_st(const iovec* iov, int iovcnt, size_t max) {
  if (!peer_known_ || failed() || left_) return 0;
  size_t want = iov_total(iov, iovcnt);
  if (want > max) want = max;
  // Bytes queued before these go first (credits found while a write was being posted
  // could not drain them then).
  if (!queue_.empty()) drain_st();
  const size_t direct = queue_.empty() && !held_ ? write_st(iov, iovcnt, want) : 0;
  if (failed()) return 0;
  size_t rest = want - direct;
  const size_t room = queue_.size() < queue_limit_ ? queue_limit_ - queue_.size() : 0;
  if (rest > room) rest = room;
  if (rest == 0) {
    if (direct < want) tx_starved_ = true;
    return direct;
  }
  const bool was_empty = queue_.empty();
  IovCursor from{iov, iovcnt};
  from.take(direct, [](const uint8_t*, size_t, size_t) {});
  queue_.push(rest, [&](uint8_t* dst, size_t k) {
    from.take(k, [&](const uint8_t* app, size_t done, size_t piece) { memcpy(dst + done, app, piece); });
  });
  if (direct + rest < want) tx_starved_ = true;
  // The peer returns credits at once while it knows we are blocked (write_st told it
  // when the ring had no room at all); their completion must reach someone who drains.
  if (was_empty) {
    if (!held_ && tx_flow_.tell_blocked(tx_.written())) post_control_st(wire::Op::blocked, tx_.written());
    arm_and_poll_st();
  }
  return direct + rest;
}

// Moves queued bytes into the ring as far as it has room, then the fin that waited.
void Channel::drain_st() {
  while (!queue_.empty() && !held_ && !failed() && !left_) {
    iovec v[16];
    const int n = queue_.gather(v, 16, max_record_ * 2);
    const size_t k = write_st(v, n, iov_total(v, n));
    if (k == 0) break;
    queue_.pop(k);
    if (tx_starved_ && writable_st()) {
      tx_starved_ = false;
      ++tx_events_;
    }
    signal_->bump();
  }
  if (queue_.empty() && fin_pending_ && !held_ && !failed() && !left_) {
    fin_pending_ = false;
    post_control_st(wire::Op::fin, tx_.written());
  }
}

bool Channel::finish_st() {
  if (failed()) return false;
  if (queue_.empty() && !held_) return post_control_st(wire::Op::fin, tx_.written());
  fin_pending_ = true;
  arm_and_poll_st();
  return true;
}

// Copies up to `want` bytes (no more than iov holds) into the peer's ring; returns how
// many (0 when the ring is full, after telling the peer it is blocked).
size_t Channel::write_st(const iovec* iov, int iovcnt, size_t want) {
  ring::Record r[ring::kMaxRecords];
  const int n = ring::plan(tx_, want, max_record_, r);
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += r[i].payload;
  if (total == 0) {
    if (want > 0 && tx_flow_.tell_blocked(tx_.written())) post_control_st(wire::Op::blocked, tx_.written());
    return 0;
  }
  uint8_t* staging = tx_buf_.get();
  IovCursor from{iov, iovcnt};
  for (int i = 0; i < n; ++i) {
    uint8_t* to = staging + r[i].payload_offset();
    from.take(r[i].payload, [&](const uint8_t* app, size_t at, size_t k) { memcpy(to + at, app, k); });
  }
  for (int i = 0; i < n; ++i) ring::seal(staging, r[i]);
  // Posting may poll the CQ for send-queue room; credits found then must not drain the
  // queue into records planned here.
  writing_ = true;
  const bool posted = post_records_st(r, n);
  writing_ = false;
  if (!posted) return 0;
  for (int i = 0; i < n; ++i) tx_.commit(r[i].size());
  payload_written_ += total;
  return total;
}

size_t Channel::recv_st(const iovec* iov, int iovcnt, bool peek) {
  if (rx_left_ || !trusted()) return 0;
  IovCursor to{iov, iovcnt};
  const size_t got = rx_.read(iov_total(iov, iovcnt), peek, [&](const uint8_t* ring, size_t n) {
    to.take(n, [&](uint8_t* app, size_t at, size_t k) { memcpy(app, ring + at, k); });
  });
  if (!peek) payload_read_ += got;
  if (!peek && got > 0 && rx_flow_.credit_due(rx_.cursors())) give_credit_st();
  return got;
}

bool Channel::land_st() {
  switch (rx_.scan()) {
    case ring::RecordRing::Scan::nothing: return false;
    case ring::RecordRing::Scan::landed: ++rx_events_; return true;
    case ring::RecordRing::Scan::malformed: fail_st("peer wrote a malformed record or past its credits"); return true;
  }
  return false;
}

bool Channel::look_st() {
  if (++looks_ % kCqEvery != 0 && peer_cutover_known() && !failed()) return scan_st();
  return progress_st();
}

bool Channel::scan_st() {
  ++polls_;
  if (!land_st()) return false;
  signal_->bump();
  return true;
}

bool Channel::proven_st(uint64_t secret) {
  trusted_.store(true, std::memory_order_release);
  ++rx_events_;
  signal_->bump();
  return !failed() && post_control_st(wire::Op::bound, secret);
}

void Channel::handle_control_st(const wire::Control& c) {
  if (held_) {
    // Before the server proved it read our Proof, nothing it says about the stream
    // counts (it may not be the TCP connection's server).
    if (c.op == wire::Op::bound) {
      if (c.value != secret_) return fail_st("peer's binding does not name our proof");
      held_ = false;
      trusted_.store(true, std::memory_order_release);
      stats::add(stats::g.upgraded, 1);
      ++rx_events_;
      ++tx_events_;
      drain_st();
      signal_->bump();
      return;
    }
    if (c.op == wire::Op::cutover || c.op == wire::Op::fin || c.op == wire::Op::handoff)
      return fail_st("peer spoke of the stream before it proved it holds the TCP connection");
  } else if (c.op == wire::Op::bound) {
    return fail_st("unexpected binding from the peer");
  }
  switch (c.op) {
    case wire::Op::bound: break;
    case wire::Op::credit:
      if (!tx_.ack(c.value)) fail_st("peer returned an impossible consumer cursor");
      if (tx_starved_ && writable_st()) {
        tx_starved_ = false;
        ++tx_events_;
      }
      break;
    case wire::Op::blocked:
      rx_flow_.on_blocked();
      if (rx_flow_.credit_due(rx_.cursors())) give_credit_st();
      break;
    case wire::Op::cutover:
      peer_cutover_known_ = true;
      peer_cutover_ = c.value;
      break;
    case wire::Op::fin:
      land_st();  // every write sent before the fin has landed by now
      if (c.value != rx_.produced()) fail_st("peer's final cursor does not match the bytes received");
      peer_fin_ = true;
      ++rx_events_;
      break;
    case wire::Op::sleep:
      switch (tx_flow_.on_sleep(c.value, c.count, tx_)) {
        case flow::Sender::SleepAnswer::malformed: fail_st("peer's sleep names a cursor we never wrote or too many writes"); break;
        case flow::Sender::SleepAnswer::wake_now: post_control_st(wire::Op::wake, tx_.written()); break;
        case flow::Sender::SleepAnswer::waking_writes: break;
      }
      break;
    case wire::Op::wake:
      rx_flow_.on_wake();
      break;
    case wire::Op::handoff:
      if (c.value > payload_written_) fail_st("peer's hand-off names bytes we never wrote");
      peer_handoff_ = true;
      peer_handoff_read_ = c.value;
      ++rx_events_;
      break;
  }
}

bool Channel::progress_st() {
  ++polls_;
  bool changed = false;
  ibv_wc wc[16];
  for (;;) {
    int n = ibv_poll_cq(cq_.get(), 16, wc);
    if (n < 0) {
      fail_st("ibv_poll_cq failed");
      return true;
    }
    if (n == 0) break;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      if (w.status != IBV_WC_SUCCESS) {
        fail_st(std::string("completion error: ") + ibv_wc_status_str(w.status));
        changed = true;
        continue;
      }
      if (w.wr_id & kRecvTag) {
        int slot = static_cast<int>(w.wr_id & ~kRecvTag);
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          // A write our sleep asked for; its record is found like any other.
          rx_flow_.on_waking_write();
        } else {
          wire::Control c;
          if (wire::decode(ctl_recv_buf_.get() + slot * kSlot, w.byte_len, c)) {
            handle_control_st(c);
          } else {
            fail_st("malformed control message");
          }
        }
        repost_st(slot);
        changed = true;
      } else {
        if (w.wr_id & kConfirmTag) confirmed_ = true;
        if (w.wr_id & kHandoffTag) handoff_confirmed_ = true;
        sq_outstanding_ -= static_cast<int>(w.wr_id & ~(kConfirmTag | kHandoffTag));
        changed = true;  // send space may have opened up
      }
    }
  }
  if (!failed() && land_st()) changed = true;
  if (changed && !writing_ && !queue_.empty()) drain_st();
  if (changed) {
    stats::add(stats::g.cq_polls, 1);
    signal_->bump();
  }
  return changed;
}

void Channel::arm_st() {
  if (armed_) return;
  armed_ = ibv_req_notify_cq(cq_.get(), 0) == 0;
}

// Arms the CQ for the credits that drain the send queue, then polls once: a credit that
// completed before the arming raises no event, and nobody else may be looking.
void Channel::arm_and_poll_st() {
  arm_st();
  progress_st();
}

void Channel::give_credit_st() {
  rx_flow_.credit_given();
  // The consumed slots were cleared for reuse (RecordRing::read): before the peer may write them.
  std::atomic_thread_fence(std::memory_order_release);
  post_control_st(wire::Op::credit, rx_.cursors().take_credit());
}

void Channel::prepare_sleep_st() {
  // A reader about to sleep reports everything it consumed, so that if its process
  // dies meanwhile the peer can tell whether it left bytes unread (peer_left_unread_st).
  if (rx_.cursors().uncredited() && !failed()) give_credit_st();
  arm_st();
  progress_st();
  // Writes landing from here on raise no completion unless the peer knows we sleep; it
  // compares where we looked with what it wrote, so nothing written meanwhile is missed.
  if (!failed() && peer_known_) {
    if (const uint32_t k = rx_flow_.sleep_count(rx_.records())) {
      if (post_control_st(wire::Control{wire::Op::sleep, rx_.produced(), k})) {
        rx_flow_.slept(k);
        stats::add(stats::g.sleep_notices, 1);
      }
    }
  }

}

bool Channel::on_notified_st() {
  armed_ = false;
  const uint64_t before = polls_;
  progress_st();
  polls_seen_ = polls_;
  if (signal_->wanted() || before == polls_at_event_) {
    prepare_sleep_st();
  } else if (!drained_st()) {
    arm_and_poll_st();  // the credits that drain the send queue must wake us
  }
  polls_at_event_ = polls_;
  return !armed_;
}

bool Channel::recheck_st() {
  if (armed_) return false;
  if (!drained_st()) {
    arm_and_poll_st();
    return !armed_;
  }
  if (polls_ == polls_seen_) {
    prepare_sleep_st();
    return !armed_;
  }
  polls_seen_ = polls_;
  return true;
}

void Channel::fail_st(const std::string& why) {
  if (!error_.empty()) return;
  error_ = why;
  FERRY_LOG(info, "channel", "connection failed: %s", why.c_str());
  ++rx_events_;
  ++tx_events_;
  signal_->bump();
}

void Channel::probe_st() {
  if (failed() || left_ || !peer_known_) return;
  // A send queue full of writes in flight probes already: the poller never waits here
  // for room (a vanished peer would hold it until the queue pair gives up).
  if (sq_outstanding_ + 1 > kSendDepth) return;
  if (prober_.tick(!queue_.empty() || tx_starved_, tx_.acked())) flush_st();
}

// A zero-length signaled write: its completion proves every earlier request completed.
bool Channel::flush_st() {
  if (failed() || !reserve_sq_st(1)) return false;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer_addr_;
  wr.wr.rdma.rkey = peer_rkey_;
  sq_outstanding_ += 1;
  posted_ += 1;
  wr.wr_id = static_cast<uint64_t>(unsignaled_ + 1);  // retires the unsignaled batch too
  unsignaled_ = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_.get(), &wr, &bad) != 0) {
    fail_st(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

int64_t Channel::take_unacked_st(std::vector<uint8_t>& out) {
  const int64_t resent = downgrade::resend(tx_buf_.get(), tx_.capacity(), tx_.acked(), tx_.written(),
                                           [&](const uint8_t* p, uint64_t n) { out.insert(out.end(), p, p + n); });
  iovec v[16];
  while (!queue_.empty()) {
    const int n = queue_.gather(v, 16, ~size_t{0});
    size_t k = 0;
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(v[i].iov_base);
      out.insert(out.end(), p, p + v[i].iov_len);
      k += v[i].iov_len;
    }
    queue_.pop(k);
  }
  leave_st();
  return resent;
}

void Channel::leave_st() {
  left_ = true;
  abort_st();
}

}  // namespace ferry

