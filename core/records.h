// How bytes sit in a receive ring: as records the receiver finds by looking at memory,
// with no completion per write.
//
// Every RDMA write the sender posts is one record: its payload followed by an 8-byte
// footer (the payload's length and a tag derived from the record's cursor). A record
// takes a slot of whole 64-byte units, and slots are laid out from the top of the ring
// down: the record at cursor c occupies [top - size, top), top = capacity - c % capacity,
// with its footer in the last 8 bytes, [top - 8, top), and its payload just below. So
// the receiver always knows where the next footer will be (it follows from its produced
// cursor alone), and since a write's bytes land in address order, the whole record has
// landed once its footer has.
//
// What the receiver reads before a footer lands must never pass for one. Footers only
// ever sit in the last 8 bytes of a 64-byte unit (slots are whole units from the top),
// and the receiver zeroes those 8 bytes of every unit of a record once it consumed it,
// before the space is credited back; the ring starts zeroed. A footer's last byte is
// never zero.
//
// Cursors (TxWindow, RxRing) count slot bytes, so the credit arithmetic is the ring's.
#pragma once

#include "core/ring.h"

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace ferry::ring {

constexpr uint64_t kUnit = 64;
constexpr uint64_t kFooter = 8;
constexpr int kMaxRecords = 4;  // per send: a lap's end costs one more

inline uint64_t record_size(uint64_t payload) { return (payload + kFooter + kUnit - 1) & ~(kUnit - 1); }
inline uint64_t top_of(uint64_t capacity, uint64_t cursor) { return capacity - (cursor & (capacity - 1)); }

// The tag, derived from the cursor, sits in the footer's last 4 bytes, with its top bit
// set: the byte written last is never zero once written, so a footer caught half-landed
// reads as not there yet.
inline uint64_t footer_word(uint64_t cursor, uint64_t payload) {
  return (((cursor / kUnit) & 0x7fffffff) | 0x80000000) << 32 | payload;
}
inline bool footer_landed(uint64_t word) { return (word >> 56) != 0; }
// The payload length a landed footer word found at `cursor` announces; false if it is
// not a footer written for that cursor.
inline bool footer_payload(uint64_t word, uint64_t cursor, uint64_t& payload) {
  if (word >> 32 != footer_word(cursor, 0) >> 32) return false;
  payload = static_cast<uint32_t>(word);
  return payload > 0;
}

// One record of a send: its cursor, the top of its slot, and its payload length. No
// member initializers: plan() fills the records it returns, and a send's array of them
// is not cleared first.
struct Record {
  uint64_t cursor;
  uint64_t top;
  uint64_t payload;
  uint64_t payload_offset() const { return top - kFooter - payload; }
};

// The records that carry up to `want` bytes as the window stands: each at most
// `most` bytes of payload, none crossing the ring's end (a send that reaches it is
// split there). Returns how many; the window does not change.
inline int plan(const TxWindow& tx, uint64_t want, uint64_t most, Record out[kMaxRecords]) {
  int n = 0;
  uint64_t cursor = tx.written(), space = tx.space();
  while (n < kMaxRecords && want > 0 && space >= kUnit) {
    const uint64_t top = top_of(tx.capacity(), cursor);
    uint64_t room = (top < space ? top : space) - kFooter;
    if (room > most) room = most;
    const uint64_t payload = want < room ? want : room;
    out[n++] = {cursor, top, payload};
    cursor += record_size(payload);
    space -= record_size(payload);
    want -= payload;
  }
  return n;
}

// Writes record r's footer into `mem`, a copy of the peer's ring laid out the same way.
inline void put_footer(uint8_t* mem, const Record& r) {
  const uint64_t word = htole64(footer_word(r.cursor, r.payload));
  memcpy(mem + r.top - kFooter, &word, sizeof word);
}

// The receiver's side: records landing in `mem`, read in order.
class RecordRing {
 public:
  RecordRing(uint8_t* mem, uint64_t capacity, uint64_t start = 0) : mem_(mem), ring_(capacity, start) {}

  enum class Scan { nothing, landed, malformed };
  // Takes in every record whose footer has landed since the last look.
  Scan scan() {
    Scan result = Scan::nothing;
    // A full ring has no next slot: where it would be, the oldest record still sits.
    while (ring_.readable() < ring_.capacity()) {
      const uint64_t cursor = ring_.produced(), top = top_of(ring_.capacity(), cursor);
      const uint64_t word = le64toh(__atomic_load_n(reinterpret_cast<const uint64_t*>(mem_ + top - kFooter), __ATOMIC_ACQUIRE));
      if (!footer_landed(word)) return result;
      uint64_t payload;
      if (!footer_payload(word, cursor, payload) || payload + kFooter > top || !ring_.land(record_size(payload)))
        return Scan::malformed;
      ready_ += payload;
      ++records_;
      result = Scan::landed;
    }
    return result;
  }

  // Payload bytes landed and not yet consumed.
  uint64_t readable() const { return ready_; }
  uint64_t produced() const { return ring_.produced(); }
  uint64_t records() const { return records_; }  // landed since the start
  RxRing& cursors() { return ring_; }

  // Hands up to `max` readable bytes to copy(const uint8_t*, size_t), in order. Unless
  // `peek`, they are consumed, and every record consumed whole is zeroed for reuse.
  // Footers are read again here, and the peer can write its ring at any time: what it
  // may have changed since scan() is kept within the ring and the bytes counted there.
  template <class Copy>
  uint64_t read(uint64_t max, bool peek, Copy copy) {
    const uint64_t start = ring_.consumed(), end = ring_.produced() - start;
    uint64_t done = 0, at = 0, offset = offset_;
    if (max > ready_) max = ready_;
    while (done < max && at < end) {
      const uint64_t top = top_of(ring_.capacity(), start + at);
      uint64_t payload = payload_at(top);
      if (payload < offset) payload = offset;
      const uint64_t n = payload - offset < max - done ? payload - offset : max - done;
      copy(mem_ + top - kFooter - payload + offset, n);
      done += n;
      offset += n;
      if (offset < payload) break;
      if (!peek) clear(top, record_size(payload));
      at += record_size(payload);
      offset = 0;
    }
    if (!peek) {
      ring_.consume(at);
      offset_ = offset;
      ready_ -= done;
    }
    return done;
  }

 private:
  uint64_t payload_at(uint64_t top) const {
    uint64_t word;
    memcpy(&word, mem_ + top - kFooter, sizeof word);
    const uint64_t payload = static_cast<uint32_t>(le64toh(word));
    return payload + kFooter <= top ? payload : top - kFooter;
  }
  // The footer positions of the slot [top - size, top).
  void clear(uint64_t top, uint64_t size) {
    for (uint64_t at = top - kFooter;; at -= kUnit) {
      memset(mem_ + at, 0, kFooter);
      if (at < top - size + kUnit) break;
    }
  }

  uint8_t* mem_;
  RxRing ring_;
  uint64_t ready_ = 0;   // payload bytes landed, not consumed
  uint64_t records_ = 0;
  uint64_t offset_ = 0;  // bytes already read of the record at the consumer cursor
};

}  // namespace ferry::ring
