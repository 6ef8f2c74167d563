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
// One shape of record has no footer: a whole record, exactly kWhole (4096) bytes of
// payload filling a slot of kWhole bytes. A 4096-byte message with a footer is 4104
// bytes, one packet more than the payload needs on a 4096-byte path MTU; without it,
// one. The receiver tells the shapes apart by the word in the slot's last 8 bytes: a
// footer written for the record's cursor, or else (landed, but no footer of this
// cursor) the end of a whole record's payload. So the sender sends a whole record only
// when the payload's last 8 bytes could not pass for a footer of that cursor and its
// last byte is not zero (the landing test, as for footers); otherwise the message goes
// with a footer, as any other.
//
// What the receiver reads before a footer lands must never pass for one. Footers only
// ever sit in the last 8 bytes of a 64-byte unit (slots are whole units from the top),
// and the receiver zeroes those 8 bytes of every unit of a record once it consumed it,
// before the space is credited back; the ring starts zeroed. A footer's last byte is
// never zero.
//
// Cursors (TxWindow, RxRing) count slot bytes, so the credit arithmetic is the ring's.
#pragma once

#include "core/proto/ring.h"

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace ferry::ring {

constexpr uint64_t kUnit = 64;
constexpr uint64_t kFooter = 8;
constexpr int kMaxRecords = 4;  // per send: a lap's end costs one more
constexpr uint64_t kWhole = 4096;

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

// A landed word at the end of the slot at `cursor` whose top is `top`: the payload
// length and whether it is a whole record (no footer). False when it is neither.
inline bool record_at(uint64_t word, uint64_t cursor, uint64_t top, uint64_t& payload, bool& whole) {
  whole = !footer_payload(word, cursor, payload);
  if (whole) payload = kWhole;
  return payload + (whole ? 0 : kFooter) <= top;
}
inline uint64_t slot_size(uint64_t payload, bool whole) { return whole ? kWhole : record_size(payload); }

// Whether a whole record at `cursor` may carry a payload ending in `last` (its last 8
// bytes, as a little-endian word): it must read as landed and as no footer of its cursor.
inline bool whole_fits(uint64_t last, uint64_t cursor) {
  uint64_t payload;
  return footer_landed(last) && !footer_payload(last, cursor, payload);
}

// One record of a send: its cursor, the top of its slot, its payload length and shape.
// No member initializers: plan() fills the records it returns, and a send's array of
// them is not cleared first.
struct Record {
  uint64_t cursor;
  uint64_t top;
  uint64_t payload;
  bool whole;
  uint64_t tail() const { return whole ? 0 : kFooter; }  // bytes above the payload
  uint64_t payload_offset() const { return top - tail() - payload; }
  uint64_t size() const { return slot_size(payload, whole); }
  // A whole record whose payload ended up unfit (whole_fits) becomes an ordinary one:
  // moves the payload down under where its footer goes (plan() left the room).
  void unwhole(uint8_t* mem) {
    memmove(mem + top - kFooter - payload, mem + top - payload, payload);
    whole = false;
  }
};

// The records that carry up to `want` bytes as the window stands: each at most
// `most` bytes of payload, none crossing the ring's end (a send that reaches it is
// split there). A send of exactly kWhole bytes is planned as a whole record when an
// ordinary one would fit in its place too (see Record::unwhole). Returns how many; the
// window does not change.
inline int plan(const TxWindow& tx, uint64_t want, uint64_t most, Record out[kMaxRecords]) {
  int n = 0;
  uint64_t cursor = tx.written(), space = tx.space();
  while (n < kMaxRecords && want > 0 && space >= kUnit) {
    const uint64_t top = top_of(tx.capacity(), cursor);
    uint64_t room = (top < space ? top : space) - kFooter;
    if (room > most) room = most;
    const uint64_t payload = want < room ? want : room;
    const bool whole = n == 0 && want == kWhole && room >= kWhole;
    out[n++] = {cursor, top, payload, whole};
    cursor += record_size(payload);
    space -= record_size(payload);
    want -= payload;
  }
  return n;
}

// Finishes record r in `mem`, a copy of the peer's ring laid out the same way, once its
// payload is there: a whole record stays whole if its payload allows, any other gets
// its footer.
inline void seal(uint8_t* mem, Record& r) {
  if (r.whole) {
    uint64_t last;
    memcpy(&last, mem + r.top - kFooter, sizeof last);
    if (whole_fits(le64toh(last), r.cursor)) return;
    r.unwhole(mem);
  }
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
      bool whole;
      if (!record_at(word, cursor, top, payload, whole) || !ring_.land(slot_size(payload, whole))) return Scan::malformed;
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
  const RxRing& cursors() const { return ring_; }

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
      bool whole;
      uint64_t payload = payload_at(start + at, top, whole);
      if (payload < offset) payload = offset;
      const uint64_t n = payload - offset < max - done ? payload - offset : max - done;
      copy(mem_ + top - (whole ? 0 : kFooter) - payload + offset, n);
      done += n;
      offset += n;
      if (offset < payload) break;
      if (!peek) clear(top, slot_size(payload, whole));
      at += slot_size(payload, whole);
      offset = 0;
    }
    if (!peek) {
      ring_.consume(at);
      offset_ = offset;
      // Every slot landed is consumed: nothing is left to read, whatever scan() counted
      // (a record the peer shrank since would otherwise leave bytes that never come).
      ready_ = at >= end ? 0 : ready_ - done;
    }
    return done;
  }

 private:
  // The record whose slot at `cursor` ends at `top`, as its last word says now: the
  // peer may have rewritten it since scan(), so whatever it says is kept within the ring.
  uint64_t payload_at(uint64_t cursor, uint64_t top, bool& whole) const {
    uint64_t word;
    memcpy(&word, mem_ + top - kFooter, sizeof word);
    uint64_t payload;
    if (!record_at(le64toh(word), cursor, top, payload, whole)) {
      whole = false;
      payload = top - kFooter;
    }
    return payload;
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
