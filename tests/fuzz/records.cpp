// A receive ring as a peer can leave it: records_ring reads the input as a program of
// steps on one RecordRing (core/proto/records.h) over a ring of exactly its capacity.
//
// The first byte picks the peer. An honest peer (even first byte) plans and seals its
// sends as the sender does, and its writes land a few bytes at a time, in address
// order, the way an RDMA write's packets fill the ring; then every byte sent comes out
// once, in order, nothing is ever malformed, and the stream never stalls. A hostile peer
// (odd) writes any bytes anywhere at any time, between a scan and a read too, forges
// footers and whole-record ends and still plans records now and then; then the
// receiver must stay within the ring, every call must end, cursors and counts must stay
// consistent, a peek must change nothing, every slot consumed must have its footer
// positions cleared, and bytes counted readable must be readable (unless the hostile
// peer shrank their records since: then a read that gets nothing leaves none counted).
//
// Program: byte 0: peer (bit 0) and capacity (4 KiB << (byte >> 1) % 3); bytes 1-2:
// start cursor in units (cursors near 2^64 too); then steps, one byte of operation and
// its arguments each (fuzz.h: missing bytes read as zero).
#include "core/proto/records.h"
#include "tests/fuzz/fuzz.h"

#include <deque>
#include <memory>
#include <vector>

namespace ferry::fuzz {
namespace {

using ring::kFooter;
using ring::kMaxRecords;
using ring::kUnit;
using ring::kWhole;
using ring::Record;
using ring::RecordRing;
using ring::TxWindow;

constexpr int kMaxSteps = 2000;

struct Ring {
  explicit Ring(uint64_t cap) : cap(cap), mem(new uint8_t[cap]()) {}
  uint64_t cap;
  std::unique_ptr<uint8_t[]> mem;  // exactly the ring: any access outside is an ASan report
  bool inside(const uint8_t* p, size_t n) const { return p >= mem.get() && n <= cap && p - mem.get() <= static_cast<long>(cap - n); }
};

// Reads through rx, checking what every read must do whoever the peer is (and, for an
// honest one, that readable bytes are read); the bytes handed over are appended to `out`.
uint64_t checked_read(const Ring& ring, RecordRing& rx, uint64_t max, bool peek, std::vector<uint8_t>& out,
                      bool honest) {
  const uint64_t produced = rx.produced(), consumed = rx.cursors().consumed(), readable = rx.readable();
  uint64_t copied = 0;
  const uint64_t got = rx.read(max, peek, [&](const uint8_t* p, size_t n) {
    FUZZ_CHECK(ring.inside(p, n));
    out.insert(out.end(), p, p + n);
    copied += n;
  });
  FUZZ_CHECK(got == copied);
  FUZZ_CHECK(got <= max && got <= readable);
  FUZZ_CHECK(rx.produced() == produced);
  if (peek) {
    FUZZ_CHECK(rx.cursors().consumed() == consumed && rx.readable() == readable);
    return got;
  }
  const uint64_t now = rx.cursors().consumed();
  FUZZ_CHECK(now - consumed <= produced - consumed);  // forward, never past produced
  FUZZ_CHECK(rx.readable() <= readable - got);
  // Readable bytes are readable: a read that may take some takes some, and bytes
  // still counted sit in slots not yet consumed. A hostile peer may shrink records it
  // wrote after they were counted (their bytes then never come), but a read that got
  // nothing leaves nothing counted: no caller is told of bytes it can never read.
  if (honest && readable > 0 && max > 0) FUZZ_CHECK(got > 0);
  if (got == 0 && max > 0) FUZZ_CHECK(rx.readable() == 0);
  FUZZ_CHECK(rx.readable() == 0 || rx.cursors().readable() > 0);
  // Every unit consumed has its footer position zeroed before the peer may reuse it.
  for (uint64_t c = consumed; c != now; c += kUnit) {
    const uint64_t top = ring::top_of(ring.cap, c);
    for (uint64_t i = top - kFooter; i < top; ++i) FUZZ_CHECK(ring.mem[i] == 0);
  }
  return got;
}

// The writes of the sender in flight: each lands in address order, a part at a time.
struct Flight {
  struct Write {
    uint64_t offset;
    std::vector<uint8_t> bytes;
    size_t landed = 0;
  };
  std::deque<Write> writes;
  void land(Ring& ring, size_t n) {
    while (n > 0 && !writes.empty()) {
      Write& w = writes.front();
      const size_t k = std::min(n, w.bytes.size() - w.landed);
      memcpy(ring.mem.get() + w.offset + w.landed, w.bytes.data() + w.landed, k);
      w.landed += k;
      n -= k;
      if (w.landed == w.bytes.size()) writes.pop_front();
    }
  }
};

// Plans and seals a send of `want` bytes taken from the input into `staging`, the
// sender's copy of the ring; queues its writes and returns its payload bytes in order.
std::vector<uint8_t> send(Input& in, TxWindow& tx, std::vector<uint8_t>& staging, uint64_t want, Flight& flight) {
  Record r[kMaxRecords];
  const int n = ring::plan(tx, want, tx.capacity() / 4, r);
  std::vector<uint8_t> payload;
  for (int i = 0; i < n; ++i) {
    uint8_t* p = staging.data() + r[i].payload_offset();
    // The payload: a pattern, or the input's bytes; its end may be made to look like
    // the record's own footer or end in zero (a whole record must then take a footer).
    const uint8_t fill = in.u8();
    for (uint64_t k = 0; k < r[i].payload; ++k) p[k] = static_cast<uint8_t>(fill + k * 131);
    in.bytes(p, std::min<uint64_t>(r[i].payload, in.u8() % 16));
    const uint8_t end = in.u8() % 4;
    if (end == 1 && r[i].payload >= 8) {
      const uint64_t own = htole64(ring::footer_word(r[i].cursor, 1 + in.u8()));
      memcpy(p + r[i].payload - 8, &own, 8);
    } else if (end == 2) {
      p[r[i].payload - 1] = 0;
    }
    ring::seal(staging.data(), r[i]);
    const uint64_t off = r[i].payload_offset();
    FUZZ_CHECK(off + r[i].payload + r[i].tail() == r[i].top && r[i].top <= tx.capacity());
    payload.insert(payload.end(), staging.begin() + off, staging.begin() + off + r[i].payload);
    flight.writes.push_back({off, std::vector<uint8_t>(staging.begin() + off, staging.begin() + r[i].top)});
    tx.commit(r[i].size());
  }
  return payload;
}

uint64_t send_size(Input& in, uint64_t cap) {
  const uint8_t pick = in.u8();
  if (pick % 4 == 0) return kWhole;
  return pick % 4 == 1 ? in.u8() : in.u16() % (cap + 1);
}

void honest(Input& in, Ring& ring, uint64_t start) {
  TxWindow tx(ring.cap, start);
  RecordRing rx(ring.mem.get(), ring.cap, start);
  std::vector<uint8_t> staging(ring.cap);
  Flight flight;
  std::deque<uint8_t> expected;
  std::vector<uint8_t> out;
  bool blocked = false;
  auto read = [&](uint64_t max, bool peek) {
    out.clear();
    const uint64_t got = checked_read(ring, rx, max, peek, out, true);
    FUZZ_CHECK(got <= expected.size());
    for (uint64_t i = 0; i < got; ++i) FUZZ_CHECK(out[i] == expected[i]);
    if (!peek) expected.erase(expected.begin(), expected.begin() + static_cast<long>(got));
    if (!peek && rx.cursors().credit_due(blocked)) FUZZ_CHECK(tx.ack(rx.cursors().take_credit()));
    return got;
  };
  for (int step = 0; step < kMaxSteps && !in.empty(); ++step) {
    switch (in.u8() % 4) {
      case 0: {
        const uint64_t want = send_size(in, ring.cap);
        const std::vector<uint8_t> sent = send(in, tx, staging, want, flight);
        expected.insert(expected.end(), sent.begin(), sent.end());
        blocked = sent.size() < want;
        break;
      }
      case 1: flight.land(ring, 1 + in.u16() % 9000); break;
      case 2: FUZZ_CHECK(rx.scan() != RecordRing::Scan::malformed); break;
      case 3: {
        const uint8_t how = in.u8();
        read(how & 1 ? in.u16() % (2 * ring.cap) : in.u8(), how & 2);
        break;
      }
    }
    FUZZ_CHECK(rx.produced() - rx.cursors().consumed() <= ring.cap);
    FUZZ_CHECK(rx.readable() <= expected.size());
  }
  // Everything lands; the receiver finds every record and reads every byte.
  while (!expected.empty()) {
    flight.land(ring, SIZE_MAX);
    FUZZ_CHECK(rx.scan() != RecordRing::Scan::malformed);
    FUZZ_CHECK(rx.produced() == tx.written());
    blocked = true;
    FUZZ_CHECK(read(2 * ring.cap, false) > 0);  // else the stream stalled
  }
  FUZZ_CHECK(rx.readable() == 0);
}

void hostile(Input& in, Ring& ring, uint64_t start) {
  RecordRing rx(ring.mem.get(), ring.cap, start);
  std::vector<uint8_t> staging(ring.cap), out;
  Flight flight;
  for (int step = 0; step < kMaxSteps && !in.empty(); ++step) {
    const uint64_t next = rx.produced();
    switch (in.u8() % 7) {
      case 0: {  // any bytes anywhere
        const uint64_t at = in.u16() % ring.cap;
        in.bytes(ring.mem.get() + at, std::min<uint64_t>(1 + in.u8(), ring.cap - at));
        break;
      }
      case 1: {  // a footer for a slot near the next one or among those scanned, any length
        const uint8_t kind = in.u8();
        const uint64_t c = (kind & 4 ? rx.cursors().consumed() : next) + (in.u8() % 8) * kUnit;
        const uint64_t payload = kind & 1 ? in.u32() : in.u16() % ring.cap;
        const uint64_t word = htole64(kind & 2 ? ring::footer_word(c, payload) : in.u64());
        memcpy(ring.mem.get() + ring::top_of(ring.cap, c) - kFooter, &word, 8);
        break;
      }
      case 2: {  // the next slot's end rewritten: a landed word that is no footer
        uint64_t word = in.u64() | uint64_t{1} << 63;
        word = htole64(word);
        memcpy(ring.mem.get() + ring::top_of(ring.cap, next) - kFooter, &word, 8);
        break;
      }
      case 3: {  // records planned at the next slot, as far as the consumer allows
        TxWindow tx(ring.cap, rx.cursors().consumed());
        tx.commit(next - rx.cursors().consumed());
        send(in, tx, staging, send_size(in, ring.cap), flight);
        break;
      }
      case 4: flight.land(ring, 1 + in.u16() % 9000); break;
      case 5: {
        const uint64_t produced = rx.produced(), readable = rx.readable();
        const auto r = rx.scan();
        FUZZ_CHECK(rx.produced() - rx.cursors().consumed() <= ring.cap);
        FUZZ_CHECK((rx.produced() != produced) == (r == RecordRing::Scan::landed) || r == RecordRing::Scan::malformed);
        FUZZ_CHECK(rx.readable() >= readable);
        break;
      }
      case 6: {
        const uint8_t how = in.u8();
        const uint64_t max = how & 1 ? in.u16() % (2 * ring.cap) : in.u8();
        out.clear();
        checked_read(ring, rx, max, how & 2, out, false);
        if (how & 2) {  // a peek again, nothing written since: the same bytes
          std::vector<uint8_t> again;
          checked_read(ring, rx, max, true, again, false);
          FUZZ_CHECK(again == out);
        }
        break;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::fuzz;
  Input in(data, size);
  const uint8_t head = in.u8();
  Ring ring(ferry::ring::kMinCapacity << (head >> 1) % 3);
  // Cursors count from anywhere, in whole units; near 2^64 they wrap during the run.
  const uint16_t s = in.u16();
  const uint64_t start = (s & 0x8000 ? uint64_t{0} - (s & 0x7fff) * kUnit : s * kUnit);
  if (head & 1) {
    hostile(in, ring, start);
  } else {
    honest(in, ring, start);
  }
  return 0;
}
