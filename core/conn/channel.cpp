// Channel's verbs resources: queue pair, completion queue, protection domain, rings
// and staging area, made, sized and registered; and its failure.
#include "core/conn/channel.h"

#include "core/base/contract.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/poller.h"
#include "core/conn/channel_parts.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

namespace ferry {
using namespace channel_parts;
namespace {

// Memory every channel of the process has registered now (rdma_registered_most).
std::atomic<uint64_t> g_pinned{0};

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
  std::lock_guard<Lock> lock(c->mu_);  // nobody else has it yet: for the calls' contract
  for (int i = 0; i < kRecvSlots; ++i) {
    c->repost_[c->repost_n_++] = i;
    if (c->repost_n_ == kRepostBatch && !c->flush_reposts_locked()) {
      why = std::string("ibv_post_recv: ") + strerror(errno);
      return nullptr;
    }
  }
  c->arm_locked();
  return c;
}

bool Channel::handshake_gone(const std::string& why) { return why.rfind(kNoAttributes, 0) == 0; }

bool Channel::activate(std::string& why) {
  // INIT again first: only now does rdma_cm grant the remote write access.
  return move_qp(id_.get(), qp_.get(), IBV_QPS_INIT, why) && move_qp(id_.get(), qp_.get(), IBV_QPS_RTR, why) &&
         move_qp(id_.get(), qp_.get(), IBV_QPS_RTS, why);
}

void Channel::stop_locked() {
  FERRY_HELD(mu_);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE) != 0) fail_locked(std::string("ibv_modify_qp: ") + strerror(errno));
}

// Channels that saw completion events are destroyed on the poller thread only; the
// others were never among the poller's.
Channel::~Channel() {
  if (known_to_poller_) poller::forget_st(this);
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

void Channel::fail_locked(const std::string& why) {
  FERRY_HELD(mu_);
  if (!error_.empty()) return;
  error_ = why;
  FERRY_LOG(info, "channel", "connection failed: %s", why.c_str());
  ++rx_events_;
  ++tx_events_;
  signal_->bump();
}

}  // namespace ferry
