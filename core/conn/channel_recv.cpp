// Channel's receive path: the ring's records, the peer's control messages, credit,
// and the completion queue's progress.
#include "core/conn/channel.h"

#include "core/base/contract.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/channel_parts.h"
#include "core/conn/poller.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace ferry {
using namespace channel_parts;

// Receive requests go back to the queue in batches: one call for many is far cheaper
// than one each, and the few held back never starve the peer (see kRepostBatch).
void Channel::repost_locked(int slot) {
  FERRY_HELD(mu_);
  recv_.repost[recv_.repost_n++] = slot;
  if (recv_.repost_n == kRepostBatch && !flush_reposts_locked()) fail_locked("ibv_post_recv failed");
}

bool Channel::flush_reposts_locked() {
  FERRY_HELD(mu_);
  ibv_sge sge[kRepostBatch];
  ibv_recv_wr wr[kRepostBatch];
  for (int i = 0; i < recv_.repost_n; ++i) {
    int slot = recv_.repost[i];
    sge[i] = {reinterpret_cast<uint64_t>(verbs_.ctl_recv_buf.get() + slot * kSlot), kSlot, verbs_.ctl_recv_mr->lkey};
    wr[i].wr_id = kRecvTag | static_cast<uint64_t>(slot);
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < recv_.repost_n ? &wr[i + 1] : nullptr;
  }
  const int n = recv_.repost_n;
  recv_.repost_n = 0;
  ibv_recv_wr* bad = nullptr;
  return n == 0 || ibv_post_recv(verbs_.qp.get(), wr, &bad) == 0;
}

size_t Channel::recv_locked(const iovec* iov, int iovcnt, bool peek) {
  FERRY_HELD(mu_);
  if (recv_.left || !trusted()) return 0;
  IovCursor to{iov, iovcnt};
  const size_t got = recv_.ring.read(iov_total(iov, iovcnt), peek, [&](const uint8_t* ring, size_t n) {
    to.take(n, [&](uint8_t* app, size_t at, size_t k) { memcpy(app, ring + at, k); });
  });
  if (!peek) recv_.payload_read += got;
  if (!peek && got > 0 && recv_.flow.credit_due(recv_.ring.cursors())) give_credit_locked();
  return got;
}

bool Channel::take_ring_records_locked() {
  FERRY_HELD(mu_);
  switch (recv_.ring.scan()) {
    case ring::RecordRing::Scan::nothing: return false;
    case ring::RecordRing::Scan::landed: ++note_.rx_events; return true;
    case ring::RecordRing::Scan::malformed:
      fail_locked("peer wrote a malformed record or past its credits");
      return true;
  }
  return false;
}

bool Channel::poll_spinning_locked() {
  FERRY_HELD(mu_);
  if (++note_.looks % kCqEvery != 0 && peer_cutover_known() && !failed()) return poll_ring_locked();
  return poll_all_locked();
}

bool Channel::poll_ring_locked() {
  FERRY_HELD(mu_);
  ++note_.polls;
  if (!take_ring_records_locked()) return false;
  signal_->bump();
  return true;
}

bool Channel::proven_locked(uint64_t secret) {
  FERRY_HELD(mu_);
  bind_.trusted.store(true, std::memory_order_release);
  ++note_.rx_events;
  signal_->bump();
  return !failed() && post_control_locked(wire::Op::bound, secret);
}

void Channel::handle_control_locked(const wire::Control& c) {
  FERRY_HELD(mu_);
  if (bind_.held) {
    // Before the server proved it read our Proof, nothing it says about the stream
    // counts (it may not be the TCP connection's server).
    if (c.op == wire::Op::bound) {
      if (c.value != bind_.secret) return fail_locked("peer's binding does not name our proof");
      bind_.held = false;
      bind_.trusted.store(true, std::memory_order_release);
      stats::add(stats::g.upgraded, 1);
      ++note_.rx_events;
      ++note_.tx_events;
      drain_locked();
      signal_->bump();
      return;
    }
    if (c.op == wire::Op::cutover || c.op == wire::Op::fin || c.op == wire::Op::handoff)
      return fail_locked("peer spoke of the stream before it proved it holds the TCP connection");
  } else if (c.op == wire::Op::bound) {
    return fail_locked("unexpected binding from the peer");
  }
  switch (c.op) {
    case wire::Op::bound: break;
    case wire::Op::credit:
      if (!send_.ring.ack(c.value)) fail_locked("peer returned an impossible consumer cursor");
      if (send_.starved && writable_locked()) {
        send_.starved = false;
        ++note_.tx_events;
      }
      break;
    case wire::Op::blocked:
      recv_.flow.on_blocked();
      if (recv_.flow.credit_due(recv_.ring.cursors())) give_credit_locked();
      break;
    case wire::Op::cutover:
      recv_.peer_cutover_known = true;
      recv_.peer_cutover = c.value;
      break;
    case wire::Op::fin:
      take_ring_records_locked();  // every write sent before the fin has landed by now
      if (c.value != recv_.ring.produced()) fail_locked("peer's final cursor does not match the bytes received");
      recv_.peer_fin = true;
      ++note_.rx_events;
      break;
    case wire::Op::sleep:
      switch (send_.flow.on_sleep(c.value, c.count, send_.ring)) {
        case flow::Sender::SleepAnswer::malformed:
          fail_locked("peer's sleep names a cursor we never wrote or too many writes");
          break;
        case flow::Sender::SleepAnswer::wake_now: post_control_locked(wire::Op::wake, send_.ring.written()); break;
        case flow::Sender::SleepAnswer::waking_writes: break;
      }
      break;
    case wire::Op::wake:
      recv_.flow.on_wake();
      break;
    case wire::Op::handoff:
      if (c.value > send_.payload_written) fail_locked("peer's hand-off names bytes we never wrote");
      recv_.peer_handoff = true;
      recv_.peer_handoff_read = c.value;
      ++note_.rx_events;
      break;
  }
}

bool Channel::poll_all_locked() {
  FERRY_HELD(mu_);
  ++note_.polls;
  bool changed = false;
  ibv_wc wc[16];
  for (;;) {
    int n = ibv_poll_cq(verbs_.cq.get(), 16, wc);
    if (n < 0) {
      fail_locked("ibv_poll_cq failed");
      return true;
    }
    if (n == 0) break;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      if (w.status != IBV_WC_SUCCESS) {
        fail_locked(std::string("completion error: ") + ibv_wc_status_str(w.status));
        changed = true;
        continue;
      }
      if (w.wr_id & kRecvTag) {
        int slot = static_cast<int>(w.wr_id & ~kRecvTag);
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          // A write our sleep asked for; its record is found like any other.
          recv_.flow.on_waking_write();
        } else {
          wire::Control c;
          if (wire::decode(verbs_.ctl_recv_buf.get() + slot * kSlot, w.byte_len, c)) {
            handle_control_locked(c);
          } else {
            fail_locked("malformed control message");
          }
        }
        repost_locked(slot);
        changed = true;
      } else {
        if (w.wr_id & kConfirmTag) send_.confirmed = true;
        if (w.wr_id & kHandoffTag) send_.handoff_confirmed = true;
        send_.sq_outstanding -= static_cast<int>(w.wr_id & ~(kConfirmTag | kHandoffTag));
        changed = true;  // send space may have opened up
      }
    }
  }
  if (!failed() && take_ring_records_locked()) changed = true;
  if (changed && !send_.writing && !send_.queue.empty()) drain_locked();
  if (changed) {
    stats::add(stats::g.cq_polls, 1);
    signal_->bump();
  }
  return changed;
}

void Channel::give_credit_locked() {
  FERRY_HELD(mu_);
  recv_.flow.credit_given();
  // The consumed slots were cleared for reuse (RecordRing::read): before the peer may write them.
  std::atomic_thread_fence(std::memory_order_release);
  post_control_locked(wire::Op::credit, recv_.ring.cursors().take_credit());
}

}  // namespace ferry
