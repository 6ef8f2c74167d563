#include "core/proto/records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

namespace ferry::ring {
namespace {

constexpr uint64_t kCap = 4096;

TEST(Records, SlotsAreWholeUnitsFromTheTopDown) {
  EXPECT_EQ(record_size(1), 64u);
  EXPECT_EQ(record_size(56), 64u);
  EXPECT_EQ(record_size(57), 128u);
  EXPECT_EQ(top_of(kCap, 0), kCap);
  EXPECT_EQ(top_of(kCap, 64), kCap - 64);
  EXPECT_EQ(top_of(kCap, kCap * 5 + 128), kCap - 128);
  TxWindow tx(kCap);
  Record r[kMaxRecords];
  ASSERT_EQ(plan(tx, 100, kCap, r), 1);
  EXPECT_EQ(r[0].top, kCap);
  EXPECT_EQ(r[0].payload, 100u);
  EXPECT_EQ(r[0].payload_offset(), kCap - 8 - 100);
}

TEST(Records, APlanStopsAtTheRingsEndSpaceAndLimit) {
  TxWindow tx(kCap);
  tx.commit(kCap - 128);
  ASSERT_TRUE(tx.ack(kCap - 128));  // two units left in this lap, the ring otherwise free
  Record r[kMaxRecords];
  ASSERT_EQ(plan(tx, 1000, kCap, r), 2);
  EXPECT_EQ(r[0].top, 128u);
  EXPECT_EQ(r[0].payload, 120u);  // fills the lap
  EXPECT_EQ(r[1].cursor, kCap);
  EXPECT_EQ(r[1].top, kCap);  // and goes on at the top
  EXPECT_EQ(r[1].payload, 880u);
  EXPECT_EQ(plan(tx, 1000, 100, r), kMaxRecords);  // at most `most` bytes a record
  EXPECT_EQ(r[0].payload, 100u);
  TxWindow full(kCap);
  full.commit(kCap - 64);
  ASSERT_EQ(plan(full, 1000, kCap, r), 1);
  EXPECT_EQ(r[0].payload, 56u);  // the last unit
  full.commit(64);
  EXPECT_EQ(plan(full, 1, kCap, r), 0);
}

TEST(Records, FootersAreCheckedAgainstTheirCursor) {
  uint64_t p = 0;
  EXPECT_TRUE(footer_payload(footer_word(640, 33), 640, p));
  EXPECT_EQ(p, 33u);
  EXPECT_FALSE(footer_payload(footer_word(640, 33), 704, p));  // another slot's
  EXPECT_FALSE(footer_payload(footer_word(640, 0), 640, p));   // an empty record
  EXPECT_TRUE(footer_landed(footer_word(0, 0)));               // its last byte is never zero
  EXPECT_FALSE(footer_landed(footer_word(640, 33) & 0x00ffffffffffffff));  // caught half-landed

  // At cursor 64 the slot's top is 4032: no whole record fits below it, so a landed
  // word that is no footer of this cursor is malformed there.
  std::vector<uint8_t> mem(kCap);
  RecordRing rx(mem.data(), kCap, 64);
  const uint64_t at = kCap - 64 - 8;
  EXPECT_EQ(rx.scan(), RecordRing::Scan::nothing);
  uint64_t word = htole64(footer_word(128, 10));  // the footer of a later slot
  memcpy(mem.data() + at, &word, 8);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::malformed);
  word = htole64(footer_word(64, kCap));  // a payload larger than the ring
  memcpy(mem.data() + at, &word, 8);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::malformed);
  word = htole64(footer_word(64, 20));
  memcpy(mem.data() + at, &word, 8);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::landed);
  EXPECT_EQ(rx.readable(), 20u);
}

// The peer rewrites a record's footer after the receiver counted it, to a shorter
// payload in the same slot: the read takes what the footer now says, and what it no
// longer says is not left counted as readable (it would never come).
TEST(Records, AFooterShrunkAfterTheScanLeavesNothingCounted) {
  std::vector<uint8_t> mem(kCap);
  RecordRing rx(mem.data(), kCap);
  uint64_t word = htole64(footer_word(0, 200));
  memcpy(mem.data() + kCap - 8, &word, 8);
  ASSERT_EQ(rx.scan(), RecordRing::Scan::landed);
  ASSERT_EQ(rx.readable(), 200u);
  word = htole64(footer_word(0, 190));  // the same slot of 256 bytes
  memcpy(mem.data() + kCap - 8, &word, 8);
  EXPECT_EQ(rx.read(kCap, false, [](const uint8_t*, size_t) {}), 190u);
  EXPECT_EQ(rx.cursors().readable(), 0u);
  EXPECT_EQ(rx.readable(), 0u);
}

// A send of exactly kWhole bytes fills a slot of kWhole bytes with no footer, unless
// its last word could pass for a footer of its cursor or its last byte is zero; the
// receiver reads each shape back.
TEST(Records, WholeRecordsAndTheirFallback) {
  constexpr uint64_t kBig = 4 * kWhole;
  std::vector<uint8_t> mem(kBig), staging(kBig);
  TxWindow tx(kBig);
  RecordRing rx(mem.data(), kBig);
  Record r[kMaxRecords];
  EXPECT_EQ(plan(tx, kWhole - 1, kBig, r), 1);
  EXPECT_FALSE(r[0].whole);
  EXPECT_EQ(plan(tx, kWhole + 1, kBig, r), 1);
  EXPECT_FALSE(r[0].whole);
  EXPECT_EQ(plan(tx, kWhole, kWhole - 1, r), 2);  // records limited below kWhole
  EXPECT_FALSE(r[0].whole);
  // Three sends: an ordinary ending, one that looks like its own footer, one ending in 0.
  for (int kind = 0; kind < 3; ++kind) {
    ASSERT_EQ(plan(tx, kWhole, kBig, r), 1);
    ASSERT_TRUE(r[0].whole);
    EXPECT_EQ(r[0].payload_offset(), r[0].top - kWhole);
    std::vector<uint8_t> payload(kWhole);
    for (uint64_t i = 0; i < kWhole; ++i) payload[i] = static_cast<uint8_t>(i * 7 + kind + 1);
    if (kind == 1) {
      const uint64_t own = htole64(footer_word(r[0].cursor, 5));
      memcpy(payload.data() + kWhole - 8, &own, 8);
    }
    if (kind == 2) payload.back() = 0;
    memcpy(staging.data() + r[0].payload_offset(), payload.data(), kWhole);
    seal(staging.data(), r[0]);
    EXPECT_EQ(r[0].whole, kind == 0);
    EXPECT_EQ(r[0].size(), kind == 0 ? kWhole : kWhole + 64);
    const uint64_t off = r[0].payload_offset();
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), staging.begin() + static_cast<long>(off)));
    // Lands all but the last byte: nothing yet; then the rest.
    memcpy(mem.data() + off, staging.data() + off, r[0].top - off - 1);
    EXPECT_EQ(rx.scan(), RecordRing::Scan::nothing);
    mem[r[0].top - 1] = staging[r[0].top - 1];
    tx.commit(r[0].size());
    ASSERT_EQ(rx.scan(), RecordRing::Scan::landed);
    EXPECT_EQ(rx.produced(), tx.written());
    std::vector<uint8_t> out;
    EXPECT_EQ(rx.read(2 * kWhole, false, [&](const uint8_t* p, size_t k) { out.insert(out.end(), p, p + k); }), kWhole);
    EXPECT_EQ(out, payload);
    ASSERT_TRUE(tx.ack(rx.cursors().take_credit()));
  }
}

// Records filling the ring to the last unit: the next slot would be the first again,
// whose footer is still there. Nothing more lands until it is read.
TEST(Records, AFullRingTakesNothingMore) {
  std::vector<uint8_t> mem(kCap);
  TxWindow tx(kCap);
  RecordRing rx(mem.data(), kCap);
  Record r[kMaxRecords];
  uint64_t payload = 0;
  for (int sends = 0; sends < 8; ++sends) {
    for (int i = 0, n = plan(tx, kCap, kCap / 4, r); i < n; ++i) {
      seal(mem.data(), r[i]);
      tx.commit(r[i].size());
      payload += r[i].payload;
    }
  }
  ASSERT_EQ(tx.space(), 0u);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::landed);
  EXPECT_EQ(rx.produced(), kCap);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::nothing);
  EXPECT_EQ(rx.read(kCap, false, [&](const uint8_t*, size_t) {}), payload);
  EXPECT_EQ(rx.readable(), 0u);
  EXPECT_EQ(rx.scan(), RecordRing::Scan::nothing);  // their slots were cleared
}

// The peer's memory as a test stands it in: writes in flight land byte by byte in
// address order, a random part at a time, the way an RDMA write's packets fill the ring.
struct Fabric {
  struct Write {
    uint64_t offset;
    std::vector<uint8_t> bytes;
    size_t landed = 0;
  };
  std::vector<uint8_t>& mem;
  std::deque<Write> flight;
  size_t most = 200;  // bytes at a time
  void land_some(std::mt19937_64& rng) {
    if (flight.empty()) return;
    Write& w = flight.front();
    size_t n = std::min<size_t>(w.bytes.size() - w.landed, 1 + rng() % most);
    memcpy(mem.data() + w.offset + w.landed, w.bytes.data() + w.landed, n);
    w.landed += n;
    if (w.landed == w.bytes.size()) flight.pop_front();
  }
};

// A long stream with random send and read sizes, peeks, writes caught half-landed, and
// payloads made of what would pass for the next lap's footers if consumed slots were
// not cleared: every byte arrives once, in order.
// With `whole`, a ring of 8 * kWhole and a third of the sends exactly kWhole bytes,
// some of them ending in what must not pass for a whole record's end.
void random_stream(uint64_t kCap, bool whole) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> mem(kCap), staging(kCap);
  Fabric net{mem, {}};
  if (whole) net.most = 3000;
  TxWindow tx(kCap, uint64_t{0} - 3 * kCap + 64 * 5);  // the cursors wrap around 2^64 too
  RecordRing rx(mem.data(), kCap, tx.written());
  uint64_t wholes = 0;
  RxRing& cur = rx.cursors();
  std::deque<uint8_t> expected;
  uint64_t sent = 0, received = 0, counter = 0;
  const uint64_t total = 2'000'000;
  bool starved = false;
  while (received < total) {
    uint64_t want = std::min<uint64_t>(whole && rng() % 3 == 0 ? kWhole : rng() % 2500, total - sent);
    Record r[kMaxRecords];
    int n = plan(tx, want, kCap / 4, r);
    uint64_t planned = 0;
    for (int i = 0; i < n; ++i) {
      const size_t first = expected.size();
      for (uint64_t k = 0; k < r[i].payload; ++k) {
        uint64_t at = r[i].payload_offset() + k;
        uint8_t byte;
        if (at % kUnit >= kUnit - kFooter) {  // a footer position: a forgery for the next lap
          uint64_t next = r[i].cursor + kCap + (r[i].top - (at - at % kUnit + kUnit));
          uint64_t fake = htole64(footer_word(next, 8));
          byte = reinterpret_cast<uint8_t*>(&fake)[at % kFooter];
        } else {
          byte = static_cast<uint8_t>(counter++ * 2654435761u >> 11);
        }
        staging[at] = byte;
        expected.push_back(byte);
      }
      if (r[i].whole && rng() % 3 == 0) {  // its end: a footer of its own cursor, or a zero
        const uint64_t own = htole64(footer_word(r[i].cursor, 1 + rng() % 100));
        const int k = rng() % 2 ? 8 : 1;
        for (int b = 0; b < k; ++b) {
          const uint8_t byte = k == 8 ? reinterpret_cast<const uint8_t*>(&own)[b] : 0;
          staging[r[i].top - k + b] = byte;
          expected[first + kWhole - k + b] = byte;
        }
      }
      seal(staging.data(), r[i]);
      wholes += r[i].whole;
      uint64_t off = r[i].payload_offset();
      net.flight.push_back({off, std::vector<uint8_t>(staging.begin() + off, staging.begin() + r[i].top)});
      tx.commit(r[i].size());
      planned += r[i].payload;
    }
    sent += planned;
    starved = planned < want;
    for (int k = rng() % 6; k > 0; --k) net.land_some(rng);
    ASSERT_NE(rx.scan(), RecordRing::Scan::malformed) << "at " << rx.produced();
    std::vector<uint8_t> out(rng() % (whole ? 3 * kWhole : 3000));
    const bool peek = rng() % 5 == 0;
    size_t pos = 0;
    uint64_t got = rx.read(out.size(), peek, [&](const uint8_t* p, size_t k) {
      memcpy(out.data() + pos, p, k);
      pos += k;
    });
    ASSERT_EQ(pos, got);
    for (uint64_t i = 0; i < got; ++i) ASSERT_EQ(out[i], expected[i]) << "byte " << received + i;
    if (!peek) {
      expected.erase(expected.begin(), expected.begin() + static_cast<long>(got));
      received += got;
    }
    if (cur.credit_due(starved)) {
      ASSERT_TRUE(tx.ack(cur.take_credit()));
    }
    if (tx.space() == 0 && net.flight.empty() && rx.readable() == 0) FAIL() << "stalled";
  }
  EXPECT_EQ(sent, total);
  if (whole) {
    EXPECT_GT(wholes, 100u);
  }
}

TEST(Records, RandomStreamWithHalfLandedWritesArrivesIntact) { random_stream(kCap, false); }
TEST(Records, RandomStreamWithWholeRecordsArrivesIntact) { random_stream(8 * kWhole, true); }

}  // namespace
}  // namespace ferry::ring
