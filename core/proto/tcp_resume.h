// The arithmetic of a downgrade: an upgraded connection going back to kernel TCP with
// no byte lost, duplicated or reordered (docs/design.md, "Downgrade"). Pure: no verbs,
// no sockets, so every case can be tested.
//
// Stream offsets count payload bytes since the connection began, in one direction:
// what TCP carried before the cutover, then what the ring carried. After a downgrade
// each sender writes, on TCP, a Header naming the offset of the first byte that
// follows it, then every byte from there on: the payload of its records the peer had
// not yet reported consuming (still in its staging area, which is reused only once
// credited), then its send queue, then new sends. Each receiver reads the Header and
// drops the bytes it had already consumed from its ring.
#pragma once

#include "core/proto/records.h"

#include <cstddef>
#include <cstdint>

namespace ferry::tcp_resume {

constexpr uint32_t kMagic = 0x46525944;  // "FRYD"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 16;

struct Header {
  uint64_t offset = 0;  // stream offset of the first byte after the header
};

void encode(const Header& h, uint8_t out[kHeaderSize]);
// False unless the 16 bytes are a header of this version: the stream is then broken.
bool decode(const uint8_t in[kHeaderSize], Header& out);

// The sender's side: calls span(const uint8_t* bytes, uint64_t n), in stream order, for
// the payload of every record in `staging` (its copy of the peer's ring of `capacity`
// bytes) from slot cursor `from` (the peer's last credit) to `to` (its write cursor).
// Returns the bytes passed, or -1 if the records there do not add up to exactly that
// range (then the staging area is not what was written, and nothing can be resent).
template <class Span>
int64_t resend(const uint8_t* staging, uint64_t capacity, uint64_t from, uint64_t to, Span span) {
  int64_t total = 0;
  for (uint64_t c = from; c != to;) {
    if (to - c > capacity) return -1;
    const uint64_t top = ring::top_of(capacity, c);
    uint64_t word;
    __builtin_memcpy(&word, staging + top - ring::kFooter, sizeof word);
    uint64_t payload;
    bool whole;
    if (!ring::footer_landed(le64toh(word)) || !ring::record_at(le64toh(word), c, top, payload, whole)) return -1;
    const uint64_t size = ring::slot_size(payload, whole);
    if (size > to - c) return -1;
    span(staging + top - (whole ? 0 : ring::kFooter) - payload, payload);
    total += static_cast<int64_t>(payload);
    c += size;
  }
  return total;
}

// Where the sender's resent stream starts: its stream offset past every payload byte
// it took (TCP before the cutover, then ring), less the bytes resend() passes.
inline uint64_t resend_offset(uint64_t sent_offset, uint64_t resent) { return sent_offset - resent; }

// A hand-off (no header): the peer read `peer_read` ring payload bytes of ours and
// wants the rest. The resent bytes start at ring payload offset `from` (its last
// credit) and number `resent`: `skip` of them it already has. False when the peer
// names bytes before its credit or past what was written: a broken peer.
inline bool skip_to(uint64_t from, uint64_t peer_read, uint64_t resent, uint64_t& skip) {
  if (peer_read < from || peer_read - from > resent) return false;
  skip = peer_read - from;
  return true;
}

// The receiver's side: of a stream that resumes at header.offset, how many leading
// bytes it already consumed (`consumed`: its own stream offset) and must drop.
// `most` bounds an honest overlap: the peer can only resend what its staging area held,
// at most the receiver's ring. A header past `consumed` would mean lost bytes, one
// further back than `most` a broken peer: both false.
inline bool overlap(uint64_t consumed, const Header& h, uint64_t most, uint64_t& drop) {
  if (h.offset > consumed) return false;  // offsets never wrap: 2^64 bytes take centuries
  drop = consumed - h.offset;
  return drop <= most;
}

// A receiver's progress through the front of a resumed stream: the header (which may
// arrive in pieces), then `drop` bytes to discard, then the program's bytes.
class Resume {
 public:
  // `consumed`: the receiver's stream offset when it left the ring; `most` as above.
  Resume(uint64_t consumed, uint64_t most) : consumed_(consumed), most_(most) {}

  enum class Step { more, done, broken };
  // Takes what TCP delivered, n bytes at `in`; `used` says how many belong to the
  // header or the dropped overlap (the rest, if done, are the program's).
  Step take(const uint8_t* in, size_t n, size_t& used) {
    used = 0;
    while (have_ < kHeaderSize && used < n) buf_[have_++] = in[used++];
    if (have_ < kHeaderSize) return Step::more;
    if (!parsed_) {
      Header h;
      if (!decode(buf_, h) || !overlap(consumed_, h, most_, left_)) return Step::broken;
      parsed_ = true;
    }
    const uint64_t skip = left_ < n - used ? left_ : n - used;
    used += skip;
    left_ -= skip;
    return left_ == 0 ? Step::done : Step::more;
  }
  bool header_read() const { return parsed_; }
  // Bytes take() still wants before the program's: the rest of the header, else the
  // rest of the overlap.
  uint64_t needs() const { return have_ < kHeaderSize ? kHeaderSize - have_ : left_; }
  uint64_t still_to_drop() const { return left_; }  // known once the header is read

 private:
  uint64_t consumed_, most_;
  uint8_t buf_[kHeaderSize] = {};
  size_t have_ = 0;
  bool parsed_ = false;
  uint64_t left_ = 0;
};

}  // namespace ferry::tcp_resume
