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
    // before it fails and the connection goes back to TCP (core/conn/downgrade.h).
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
  c->verbs_.device = rdma::device_for(id->verbs, why);
  if (!c->verbs_.device) return nullptr;
  // A protection domain of its own: the peer's queue pair can reach this connection's
  // ring and nothing else of the process, whatever key it tries (docs/design.md,
  // "Threat model").
  c->verbs_.pd.reset(ibv_alloc_pd(c->verbs_.device->context.get()));
  if (!c->verbs_.pd) {
    why = std::string("ibv_alloc_pd: ") + strerror(errno);
    return nullptr;
  }
  ibv_pd* pd = c->verbs_.pd.get();
  c->verbs_.rx_size = ring_size;
  c->verbs_.rx_buf = rdma::allocate(ring_size);
  c->verbs_.ctl_recv_buf = rdma::allocate(kRecvSlots * kSlot);
  c->verbs_.ctl_send_buf = rdma::allocate(kSendDepth * kSlot);
  if (!c->verbs_.rx_buf || !c->verbs_.ctl_recv_buf || !c->verbs_.ctl_send_buf) {
    why = "out of memory for the rings";
    return nullptr;
  }
  c->recv_.ring = ring::RecordRing(c->verbs_.rx_buf.get(), ring_size);
  // Only the ring accepts remote writes; control buffers are local.
  c->verbs_.rx_mr.reset(ibv_reg_mr(pd, c->verbs_.rx_buf.get(), ring_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  c->verbs_.ctl_recv_mr.reset(ibv_reg_mr(pd, c->verbs_.ctl_recv_buf.get(), kRecvSlots * kSlot, IBV_ACCESS_LOCAL_WRITE));
  c->verbs_.ctl_send_mr.reset(ibv_reg_mr(pd, c->verbs_.ctl_send_buf.get(), kSendDepth * kSlot, 0));
  if (!c->verbs_.rx_mr || !c->verbs_.ctl_recv_mr || !c->verbs_.ctl_send_mr) {
    why = std::string("ibv_reg_mr: ") + strerror(errno);
    return nullptr;
  }
  c->pin(ring_size + kRecvSlots * kSlot + kSendDepth * kSlot);
  FERRY_LOG(debug, "rdma", "ring of %llu bytes at %#llx, rkey %#x", static_cast<unsigned long long>(ring_size),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(c->verbs_.rx_buf.get())), c->verbs_.rx_mr->rkey);
  ibv_context* verbs = c->verbs_.device->context.get();
  c->verbs_.cq.reset(ibv_create_cq(verbs, kSendDepth + kRecvSlots + 16, static_cast<poller::Notified*>(c.get()), c->verbs_.device->events.get(), 0));
  if (!c->verbs_.cq) {
    why = std::string("ibv_create_cq: ") + strerror(errno);
    return nullptr;
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = c->verbs_.cq.get();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kSendDepth;
  attr.cap.max_recv_wr = kRecvSlots;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = kInlineWanted;
  c->verbs_.qp.reset(ibv_create_qp(pd, &attr));
  if (!c->verbs_.qp) {
    attr.cap.max_inline_data = 0;
    c->verbs_.qp.reset(ibv_create_qp(pd, &attr));
    if (!c->verbs_.qp) {
      why = std::string("ibv_create_qp: ") + strerror(errno);
      return nullptr;
    }
  }
  // Receive requests can be posted from INIT on.
  if (!move_qp(id.get(), c->verbs_.qp.get(), IBV_QPS_INIT, why)) return nullptr;
  c->send_.max_inline = attr.cap.max_inline_data;
  c->verbs_.id = std::move(id);
  static_assert(kRecvSlots % kRepostBatch == 0);
  std::lock_guard<Lock> lock(c->mu_);  // nobody else has it yet: for the calls' contract
  for (int i = 0; i < kRecvSlots; ++i) {
    c->recv_.repost[c->recv_.repost_n++] = i;
    if (c->recv_.repost_n == kRepostBatch && !c->flush_reposts_locked()) {
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
  return move_qp(verbs_.id.get(), verbs_.qp.get(), IBV_QPS_INIT, why) && move_qp(verbs_.id.get(), verbs_.qp.get(), IBV_QPS_RTR, why) &&
         move_qp(verbs_.id.get(), verbs_.qp.get(), IBV_QPS_RTS, why);
}

void Channel::stop_locked() {
  FERRY_HELD(mu_);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(verbs_.qp.get(), &a, IBV_QP_STATE) != 0) fail_locked(std::string("ibv_modify_qp: ") + strerror(errno));
}

// Channels that saw completion events are destroyed on the poller thread only; the
// others were never among the poller's.
Channel::~Channel() {
  if (note_.known_to_poller) poller::forget_st(this);
  g_pinned.fetch_sub(verbs_.pinned, std::memory_order_relaxed);
}

void Channel::pin(uint64_t bytes) {
  verbs_.pinned += bytes;
  const uint64_t now = g_pinned.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t most = stats::g.rdma_registered_most.load(std::memory_order_relaxed);
  while (now > most && !stats::g.rdma_registered_most.compare_exchange_weak(most, now, std::memory_order_relaxed)) {
  }
}

bool Channel::use_ring(uint64_t size, std::string& why) {
  if (!ring::valid_capacity(size) || size > verbs_.rx_mr->length) {
    why = "the peer would use " + std::to_string(size) + " bytes of a ring of " + std::to_string(verbs_.rx_mr->length);
    return false;
  }
  verbs_.rx_size = size;
  recv_.ring = ring::RecordRing(verbs_.rx_buf.get(), size);
  return true;
}

wire::RingRef Channel::local_ring() const {
  return {reinterpret_cast<uint64_t>(verbs_.rx_buf.get()), verbs_.rx_mr->rkey, verbs_.rx_size};
}

bool Channel::prepare_staging(uint64_t size, std::string& why) {
  if (!ring::valid_capacity(size)) {
    why = "ring size out of range";
    return false;
  }
  verbs_.tx_buf = rdma::allocate(size);
  if (!verbs_.tx_buf) {
    why = "out of memory for the send staging area";
    return false;
  }
  verbs_.tx_mr.reset(ibv_reg_mr(verbs_.pd.get(), verbs_.tx_buf.get(), size, 0));
  if (!verbs_.tx_mr) {
    why = std::string("ibv_reg_mr: ") + strerror(errno);
    return false;
  }
  pin(size);
  return true;
}

bool Channel::set_peer(const wire::RingRef& peer, std::string& why) {
  if (!verbs_.tx_mr && !prepare_staging(peer.size, why)) return false;
  if (!ring::valid_capacity(peer.size) || peer.size > verbs_.tx_mr->length) {
    why = "peer ring larger than the staging area";
    return false;
  }
  send_.ring = ring::TxWindow(peer.size);
  send_.max_record = peer.size / 4;
  send_.peer_addr = peer.addr;
  send_.peer_rkey = peer.rkey;
  send_.peer_known = true;
  return true;
}

uint64_t Channel::registered_bytes() const {
  return verbs_.pinned;
}

void Channel::fail_locked(const std::string& why) {
  FERRY_HELD(mu_);
  if (!error_.empty()) return;
  error_ = why;
  FERRY_LOG(info, "channel", "connection failed: %s", why.c_str());
  ++note_.rx_events;
  ++note_.tx_events;
  signal_->bump();
}

}  // namespace ferry
