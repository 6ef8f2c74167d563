// The flow-control conversation of one upgraded connection, as pure state: what each
// side must tell the other about credits, blocking and sleeping, with no verbs in
// sight. The channel asks it what to post and tells it what arrived.
//
// - Credits: the receiver returns its consumer cursor once a quarter of the ring was
//   freed, or at once when the sender said it is blocked (ring::RxRing::credit_due).
//   A sender tells it is blocked once per write cursor at which the ring had no room.
// - Sleeping receivers: data writes raise no completion at the receiver, so a
//   receiver about to sleep tells the sender where it has looked (sleep, with a count
//   K of writes to carry an immediate). The sender answers wake at once if it wrote
//   past that cursor, else its next K writes carry an immediate, whose completion
//   wakes the sleeper. Both count those writes, so they agree when the sender stops;
//   the receiver sends no other sleep until the wake or all K came. K doubles (up to
//   kMostSleepWrites) while the receiver finds few records between sleeps and halves
//   while it finds many by polling.
#pragma once

#include "core/proto/ring.h"

#include <cstdint>

namespace ferry::flow {

constexpr uint32_t kMostSleepWrites = 64;

// The sending side's half.
class Sender {
 public:
  // A write found no room at cursor `written`: whether to tell the peer (once per cursor).
  bool tell_blocked(uint64_t written) {
    if (blocked_told_at_ == written) return false;
    blocked_told_at_ = written;
    return true;
  }

  enum class SleepAnswer { wake_now, waking_writes, malformed };
  // The peer sleeps having looked up to cursor `looked` and asks for `count` waking
  // writes. A cursor we never wrote, or a count out of range, is a protocol violation.
  SleepAnswer on_sleep(uint64_t looked, uint32_t count, const ring::TxWindow& tx) {
    if (looked - tx.acked() > tx.in_flight() || count == 0 || count > kMostSleepWrites)
      return SleepAnswer::malformed;
    if (looked != tx.written()) {
      waking_left_ = 0;
      return SleepAnswer::wake_now;  // it went to sleep before our last writes
    }
    waking_left_ = count;
    return SleepAnswer::waking_writes;
  }

  // Whether the next write carries an immediate (and counts it).
  bool next_write_wakes() {
    if (waking_left_ == 0) return false;
    --waking_left_;
    return true;
  }

 private:
  uint64_t blocked_told_at_ = ~uint64_t{0};
  uint32_t waking_left_ = 0;
};

// Persist probing, as TCP probes a zero window: a sender whose bytes wait for room hears
// nothing from a peer that went silent, since nothing of its is in flight (every write
// was acknowledged) and the queue pair has nothing to fail on. Ticked at a fixed period,
// it says when to probe: bytes waited at this tick and at the one before, and no
// credit came in between. The probe is an empty write: a peer that is there
// acknowledges it in its adapter, one that vanished lets the queue pair run out of
// retries, and the connection fails (the stream then goes on over TCP).
class Prober {
 public:
  // `waiting`: bytes wait for room in the peer's ring; `credited`: the peer's last
  // credit. True: probe now.
  bool tick(bool waiting, uint64_t credited) {
    const bool due = waiting && waited_ && credited == credited_;
    waited_ = waiting;
    credited_ = credited;
    return due;
  }

 private:
  bool waited_ = false;
  uint64_t credited_ = 0;
};

// The receiving side's half.
class Receiver {
 public:
  void on_blocked() { peer_blocked_ = true; }
  bool credit_due(const ring::RxRing& cursors) const { return cursors.credit_due(peer_blocked_); }
  void credit_given() { peer_blocked_ = false; }

  // About to sleep, having found `records` records so far: the count of waking writes
  // to ask for in a sleep message, or 0 when none must be sent (one is still owed).
  uint32_t sleep_count(uint64_t records) {
    if (asked_) return 0;
    if (records - records_at_sleep_ > 4 * uint64_t{sleep_writes_}) {
      sleep_writes_ = sleep_writes_ > 1 ? sleep_writes_ / 2 : 1;
    } else if (sleep_writes_ < kMostSleepWrites) {
      sleep_writes_ *= 2;
    }
    records_at_sleep_ = records;
    return sleep_writes_;
  }
  // The sleep message asking for `count` writes was posted.
  void slept(uint32_t count) {
    asked_ = true;
    owed_ = count;
  }
  void on_wake() {
    asked_ = false;
    owed_ = 0;
  }
  // A write carrying an immediate arrived.
  void on_waking_write() {
    if (owed_ > 0 && --owed_ == 0) asked_ = false;
  }
  bool asked() const { return asked_; }

 private:
  bool peer_blocked_ = false;
  bool asked_ = false;  // a sleep was told; a wake or owed_ waking writes are due
  uint32_t owed_ = 0;
  uint32_t sleep_writes_ = 1;
  uint64_t records_at_sleep_ = 0;
};

}  // namespace ferry::flow
