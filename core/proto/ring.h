// Byte-ring arithmetic for one direction of an RDMA stream, with no verbs in sight.
//
// The receiver owns a ring of `capacity` bytes (a power of two) in registered memory;
// the sender RDMA-writes into it. Both sides count bytes since the stream began with
// 64-bit cursors: the sender's `written` and the receiver's `produced` advance as data
// lands, the receiver's `consumed` as the application reads, and the sender learns
// `consumed` back in batches (credit returns). Ring offsets are cursor % capacity, and
// all differences are unsigned, so the arithmetic stays right even when a cursor wraps
// around 2^64.
#pragma once

#include <cstdint>

namespace ferry::ring {

constexpr uint64_t kMinCapacity = 4096;
constexpr uint64_t kMaxCapacity = uint64_t{1} << 30;

constexpr bool valid_capacity(uint64_t c) {
  return c >= kMinCapacity && c <= kMaxCapacity && (c & (c - 1)) == 0;
}

// The sender's view of the peer's ring.
class TxWindow {
 public:
  explicit TxWindow(uint64_t capacity, uint64_t start = 0) : capacity_(capacity), written_(start), acked_(start) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t written() const { return written_; }
  uint64_t acked() const { return acked_; }
  uint64_t in_flight() const { return written_ - acked_; }
  uint64_t space() const { return capacity_ - in_flight(); }

  // n more bytes were written (core/proto/records.h plans where).
  void commit(uint64_t n) { written_ += n; }

  // The peer says it has consumed everything before `consumed`. A cursor that goes
  // backwards or past what was written is a protocol violation: false, nothing changes.
  bool ack(uint64_t consumed) {
    if (consumed - acked_ > written_ - acked_) return false;
    acked_ = consumed;
    return true;
  }

 private:
  uint64_t capacity_;
  uint64_t written_;
  uint64_t acked_;
};

// The receiver's own ring.
class RxRing {
 public:
  explicit RxRing(uint64_t capacity, uint64_t start = 0)
      : capacity_(capacity), produced_(start), consumed_(start), returned_(start) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t produced() const { return produced_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t readable() const { return produced_ - consumed_; }

  // n more bytes landed (a record was found, core/proto/records.h). False when that would
  // overrun unread data: the peer ignored the credits; nothing changes.
  bool land(uint64_t n) {
    if (n > capacity_ - readable()) return false;
    produced_ += n;
    return true;
  }

  void consume(uint64_t n) { consumed_ += n < readable() ? n : readable(); }

  // Credit returns are batched: send the consumer cursor once a quarter of the ring has
  // been freed since the last return, or at once when the sender says it is blocked.
  bool credit_due(bool peer_blocked) const {
    uint64_t freed = consumed_ - returned_;
    return freed >= capacity_ / 4 || (peer_blocked && freed > 0);
  }
  // Bytes consumed since the last return.
  bool uncredited() const { return consumed_ != returned_; }
  // Marks the current consumer cursor as returned and gives it.
  uint64_t take_credit() { return returned_ = consumed_; }

 private:
  uint64_t capacity_;
  uint64_t produced_;
  uint64_t consumed_;
  uint64_t returned_;
};

}  // namespace ferry::ring
