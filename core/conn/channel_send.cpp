// Channel's send path: records into the peer's ring, control messages, the send
// queue's room, and what is left to send when the connection leaves RDMA.
#include "core/conn/channel.h"

#include "core/base/contract.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/channel_parts.h"
#include "core/conn/poller.h"
#include "core/proto/tcp_resume.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace ferry {
using namespace channel_parts;
namespace {

// The longest a sender spins for send-queue room (reserve_sq_locked).
constexpr std::chrono::seconds kSqPatience{10};

}  // namespace

// Send-queue room for `wrs` more work requests, polling completions while it is full.
// The queue pair's own limits (ack timeout and retries, RNR retries) fail it within
// seconds when the peer takes nothing; kSqPatience bounds the spin should they not.
bool Channel::reserve_sq_locked(int wrs) {
  FERRY_HELD(mu_);
  if (send_.sq_outstanding + wrs <= kSendDepth) return true;
  const auto until = std::chrono::steady_clock::now() + kSqPatience;
  for (uint32_t n = 0; send_.sq_outstanding + wrs > kSendDepth; ++n) {
    poll_all_locked();
    if (failed()) return false;
    if (n % 1024 == 1023 && std::chrono::steady_clock::now() > until) {
      fail_locked("the peer took none of our sends for " + std::to_string(kSqPatience.count()) + " s");
      return false;
    }
  }
  return true;
}

// One signaled request per kSignalEvery: its completion retires the whole batch.
uint32_t Channel::signal_flag_locked(int wrs) {
  FERRY_HELD(mu_);
  send_.sq_outstanding += wrs;
  send_.posted += static_cast<uint64_t>(wrs);
  send_.unsignaled += wrs;
  if (send_.unsignaled >= kSignalEvery) return IBV_SEND_SIGNALED;
  return 0;
}

// One write per record, posted together. The last carries an immediate when the peer
// sleeps: its completion is the peer's wake-up.
bool Channel::post_records_locked(const ring::Record* r, int n) {
  FERRY_HELD(mu_);
  if (!reserve_sq_locked(n)) return false;
  ibv_sge sge[ring::kMaxRecords];
  ibv_send_wr wr[ring::kMaxRecords];
  for (int i = 0; i < n; ++i) {
    const uint64_t off = r[i].payload_offset(), len = r[i].payload + r[i].tail();
    wr[i] = {};
    sge[i] = {reinterpret_cast<uint64_t>(verbs_.tx_buf.get() + off), static_cast<uint32_t>(len), verbs_.tx_mr->lkey};
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].wr.rdma.remote_addr = send_.peer_addr + off;
    wr[i].wr.rdma.rkey = send_.peer_rkey;
    if (len <= send_.max_inline) wr[i].send_flags |= IBV_SEND_INLINE;
    if (i + 1 < n) wr[i].next = &wr[i + 1];
  }
  ibv_send_wr& last = wr[n - 1];
  if (send_.flow.next_write_wakes()) {
    last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    last.imm_data = 0;
  }
  uint32_t flag = signal_flag_locked(n);
  last.send_flags |= flag;
  last.wr_id = flag ? static_cast<uint64_t>(send_.unsignaled) : 0;
  if (flag) send_.unsignaled = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(verbs_.qp.get(), wr, &bad) != 0) {
    fail_locked(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

bool Channel::post_control_locked(const wire::Control& c, bool confirm) {
  FERRY_HELD(mu_);
  return post_tagged_locked(c, confirm ? kConfirmTag : 0);
}

bool Channel::hand_off_locked() {
  FERRY_HELD(mu_);
  if (recv_.left) return true;
  if (!post_tagged_locked(wire::Control{wire::Op::handoff, recv_.payload_read}, kHandoffTag)) return false;
  recv_.left = true;
  return true;
}

bool Channel::post_tagged_locked(const wire::Control& c, uint64_t tag) {
  FERRY_HELD(mu_);
  if (failed() || !reserve_sq_locked(1)) return false;
  uint8_t* slot = verbs_.ctl_send_buf.get() + send_.ctl_next * kSlot;
  send_.ctl_next = (send_.ctl_next + 1) % kSendDepth;
  wire::encode(c, slot);
  ibv_sge sge{reinterpret_cast<uint64_t>(slot), kSlot, verbs_.ctl_send_mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  if (kSlot <= send_.max_inline) wr.send_flags |= IBV_SEND_INLINE;
  uint32_t flag = signal_flag_locked(1);
  if (tag) flag = IBV_SEND_SIGNALED;
  wr.send_flags |= flag;
  wr.wr_id = flag ? static_cast<uint64_t>(send_.unsignaled) | tag : 0;
  if (flag) send_.unsignaled = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(verbs_.qp.get(), &wr, &bad) != 0) {
    fail_locked(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

size_t Channel::send_locked(const iovec* iov, int iovcnt, size_t max) {
  FERRY_HELD(mu_);
  if (!send_.peer_known || failed() || send_.left) return 0;
  size_t want = iov_total(iov, iovcnt);
  if (want > max) want = max;
  // Bytes queued before these go first (credits found while a write was being posted
  // could not drain them then).
  if (!send_.queue.empty()) drain_locked();
  const size_t direct = send_.queue.empty() && !bind_.held ? write_locked(iov, iovcnt, want) : 0;
  if (failed()) return 0;
  size_t rest = want - direct;
  const size_t room = send_.queue.size() < send_.queue_limit ? send_.queue_limit - send_.queue.size() : 0;
  if (rest > room) rest = room;
  if (rest == 0) {
    if (direct < want) send_.starved = true;
    return direct;
  }
  const bool was_empty = send_.queue.empty();
  IovCursor from{iov, iovcnt};
  from.take(direct, [](const uint8_t*, size_t, size_t) {});
  send_.queue.push(rest, [&](uint8_t* dst, size_t k) {
    from.take(k, [&](const uint8_t* app, size_t done, size_t piece) { memcpy(dst + done, app, piece); });
  });
  if (direct + rest < want) send_.starved = true;
  // The peer returns credits at once while it knows we are blocked (write_locked told it
  // when the ring had no room at all); their completion must reach someone who drains.
  if (was_empty) {
    if (!bind_.held && send_.flow.tell_blocked(send_.ring.written())) post_control_locked(wire::Op::blocked, send_.ring.written());
    arm_and_poll_locked();
  }
  return direct + rest;
}

// Moves queued bytes into the ring as far as it has room, then the fin that waited.
void Channel::drain_locked() {
  FERRY_HELD(mu_);
  while (!send_.queue.empty() && !bind_.held && !failed() && !send_.left) {
    iovec v[16];
    const int n = send_.queue.gather(v, 16, send_.max_record * 2);
    const size_t k = write_locked(v, n, iov_total(v, n));
    if (k == 0) break;
    send_.queue.pop(k);
    if (send_.starved && writable_locked()) {
      send_.starved = false;
      ++note_.tx_events;
    }
    signal_->bump();
  }
  if (send_.queue.empty() && send_.fin_pending && !bind_.held && !failed() && !send_.left) {
    send_.fin_pending = false;
    post_control_locked(wire::Op::fin, send_.ring.written());
  }
}

bool Channel::finish_locked() {
  FERRY_HELD(mu_);
  if (failed()) return false;
  if (send_.queue.empty() && !bind_.held) return post_control_locked(wire::Op::fin, send_.ring.written());
  send_.fin_pending = true;
  arm_and_poll_locked();
  return true;
}

// Copies up to `want` bytes (no more than iov holds) into the peer's ring; returns how
// many (0 when the ring is full, after telling the peer it is blocked).
size_t Channel::write_locked(const iovec* iov, int iovcnt, size_t want) {
  FERRY_HELD(mu_);
  ring::Record r[ring::kMaxRecords];
  const int n = ring::plan(send_.ring, want, send_.max_record, r);
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += r[i].payload;
  if (total == 0) {
    if (want > 0 && send_.flow.tell_blocked(send_.ring.written())) post_control_locked(wire::Op::blocked, send_.ring.written());
    return 0;
  }
  uint8_t* staging = verbs_.tx_buf.get();
  IovCursor from{iov, iovcnt};
  for (int i = 0; i < n; ++i) {
    uint8_t* to = staging + r[i].payload_offset();
    from.take(r[i].payload, [&](const uint8_t* app, size_t at, size_t k) { memcpy(to + at, app, k); });
  }
  for (int i = 0; i < n; ++i) ring::seal(staging, r[i]);
  // Posting may poll the CQ for send-queue room; credits found then must not drain the
  // queue into records planned here.
  send_.writing = true;
  const bool posted = post_records_locked(r, n);
  send_.writing = false;
  if (!posted) return 0;
  for (int i = 0; i < n; ++i) send_.ring.commit(r[i].size());
  send_.payload_written += total;
  return total;
}

void Channel::probe_locked() {
  FERRY_HELD(mu_);
  if (failed() || send_.left || !send_.peer_known) return;
  // A send queue full of writes in flight probes already: the poller never waits here
  // for room (a vanished peer would hold it until the queue pair gives up).
  if (send_.sq_outstanding + 1 > kSendDepth) return;
  if (send_.prober.tick(!send_.queue.empty() || send_.starved, send_.ring.acked())) flush_locked();
}

// A zero-length signaled write: its completion proves every earlier request completed.
bool Channel::flush_locked() {
  FERRY_HELD(mu_);
  if (failed() || !reserve_sq_locked(1)) return false;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = send_.peer_addr;
  wr.wr.rdma.rkey = send_.peer_rkey;
  send_.sq_outstanding += 1;
  send_.posted += 1;
  wr.wr_id = static_cast<uint64_t>(send_.unsignaled + 1);  // retires the unsignaled batch too
  send_.unsignaled = 0;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(verbs_.qp.get(), &wr, &bad) != 0) {
    fail_locked(std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  return true;
}

int64_t Channel::take_unacked_locked(std::vector<uint8_t>& out) {
  FERRY_HELD(mu_);
  const int64_t resent = tcp_resume::resend(verbs_.tx_buf.get(), send_.ring.capacity(), send_.ring.acked(), send_.ring.written(),
                                           [&](const uint8_t* p, uint64_t n) { out.insert(out.end(), p, p + n); });
  iovec v[16];
  while (!send_.queue.empty()) {
    const int n = send_.queue.gather(v, 16, ~size_t{0});
    size_t k = 0;
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(v[i].iov_base);
      out.insert(out.end(), p, p + v[i].iov_len);
      k += v[i].iov_len;
    }
    send_.queue.pop(k);
  }
  leave_locked();
  return resent;
}

void Channel::leave_locked() {
  FERRY_HELD(mu_);
  send_.left = true;
  abort_locked();
}

}  // namespace ferry
