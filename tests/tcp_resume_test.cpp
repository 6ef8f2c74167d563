// The downgrade's arithmetic: whatever point a connection leaves RDMA at, the bytes the
// receiver took from its ring followed by the resumed TCP stream (header and overlap
// dropped) are exactly the bytes the sender was given, once each, in order.
#include "core/proto/tcp_resume.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace ferry::tcp_resume {
namespace {

constexpr uint64_t kCap = 16384;

TEST(TcpResume, HeaderRoundTripsAndRejectsAnythingElse) {
  uint8_t b[kHeaderSize];
  encode(Header{0x0102030405060708ull}, b);
  Header h;
  ASSERT_TRUE(decode(b, h));
  EXPECT_EQ(h.offset, 0x0102030405060708ull);
  for (size_t i = 0; i < 8; ++i) {  // magic, version, reserved: any change is refused
    uint8_t bad[kHeaderSize];
    memcpy(bad, b, sizeof bad);
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode(bad, h)) << i;
  }
  uint8_t zeros[kHeaderSize] = {};
  EXPECT_FALSE(decode(zeros, h));  // payload bytes where a header belongs
}

TEST(TcpResume, OverlapIsWhatTheReceiverAlreadyConsumed) {
  uint64_t drop = 99;
  EXPECT_TRUE(overlap(1000, Header{1000}, kCap, drop));
  EXPECT_EQ(drop, 0u);
  EXPECT_TRUE(overlap(1000, Header{400}, kCap, drop));
  EXPECT_EQ(drop, 600u);
  EXPECT_FALSE(overlap(1000, Header{1001}, kCap, drop));        // a gap: bytes lost
  EXPECT_FALSE(overlap(kCap + 1000, Header{999}, kCap, drop));  // more than a ring back
}

TEST(TcpResume, HandOffSkipsExactlyWhatThePeerReadFromItsRing) {
  uint64_t skip = 99;
  // Credited up to ring payload offset 1000, 500 bytes resent: a peer that read 1200
  // has 200 of them.
  ASSERT_TRUE(skip_to(1000, 1200, 500, skip));
  EXPECT_EQ(skip, 200u);
  ASSERT_TRUE(skip_to(1000, 1000, 500, skip));  // read nothing past its credit
  EXPECT_EQ(skip, 0u);
  ASSERT_TRUE(skip_to(1000, 1500, 500, skip));  // read everything written
  EXPECT_EQ(skip, 500u);
  EXPECT_FALSE(skip_to(1000, 999, 500, skip));   // before its own credit
  EXPECT_FALSE(skip_to(1000, 1501, 500, skip));  // past what was written
}

TEST(TcpResume, ResumeTakesAHeaderInPiecesThenDropsTheOverlap) {
  uint8_t stream[kHeaderSize + 10];
  encode(Header{100}, stream);
  for (int i = 0; i < 10; ++i) stream[kHeaderSize + i] = static_cast<uint8_t>('a' + i);
  Resume r(104, kCap);  // consumed 4 of the resent bytes already
  size_t used = 0;
  EXPECT_EQ(r.needs(), kHeaderSize);
  EXPECT_EQ(r.take(stream, 5, used), Resume::Step::more);
  EXPECT_EQ(used, 5u);
  EXPECT_FALSE(r.header_read());
  EXPECT_EQ(r.needs(), kHeaderSize - 5);  // a read of this many takes nothing of the program's
  EXPECT_EQ(r.take(stream + 5, kHeaderSize - 5 + 2, used), Resume::Step::more);  // header, 2 of 4 dropped
  EXPECT_EQ(used, kHeaderSize - 5 + 2);
  EXPECT_TRUE(r.header_read());
  EXPECT_EQ(r.still_to_drop(), 2u);
  EXPECT_EQ(r.needs(), 2u);
  EXPECT_EQ(r.take(stream + kHeaderSize + 2, 8, used), Resume::Step::done);
  EXPECT_EQ(used, 2u);  // 'e' onwards is the program's
  EXPECT_EQ(r.needs(), 0u);
  EXPECT_EQ(stream[kHeaderSize + 2 + used], 'e');

  Resume broken(50, kCap);
  EXPECT_EQ(broken.take(stream, sizeof stream, used), Resume::Step::broken);  // offset 100 > 50
}

// A sender and a receiver as the channel runs them, cut at random points.
struct Pair {
  std::vector<uint8_t> staging = std::vector<uint8_t>(kCap, 0);  // the sender's mirror
  ring::TxWindow tx{kCap};
  std::vector<uint8_t> sent;          // every byte the program gave the sender
  uint64_t ring_payload = 0;          // of those, how many went into records
  uint64_t tcp_before = 0;            // bytes TCP carried before the cutover
  std::vector<uint8_t> received;      // what the receiver handed its program
  // The receiver's view: records in order (payload bytes), how far it read.
  std::vector<std::vector<uint8_t>> records;
  size_t record_at = 0, offset_in_record = 0;
  std::vector<uint64_t> slot_of;      // each record's slot size

  // Writes one send of up to n bytes into the ring, as Channel::write_locked plans it.
  uint64_t write(std::mt19937& rng, uint64_t n) {
    ring::Record r[ring::kMaxRecords];
    const int k = ring::plan(tx, n, kCap / 4, r);
    uint64_t done = 0;
    for (int i = 0; i < k; ++i) {
      std::vector<uint8_t> payload(r[i].payload);
      for (auto& b : payload) b = static_cast<uint8_t>(rng());
      memcpy(staging.data() + r[i].payload_offset(), payload.data(), payload.size());
      ring::seal(staging.data(), r[i]);  // may turn a whole record into one with a footer
      sent.insert(sent.end(), payload.begin(), payload.end());
      records.push_back(payload);
      slot_of.push_back(r[i].size());
      tx.commit(r[i].size());
      ring_payload += r[i].payload;
      done += r[i].payload;
    }
    return done;
  }
  // The receiver's program reads up to n bytes; whole records consumed are credited.
  void read(uint64_t n, bool credit) {

    while (n > 0 && record_at < records.size()) {
      const auto& rec = records[record_at];
      const size_t k = std::min<size_t>(n, rec.size() - offset_in_record);
      received.insert(received.end(), rec.begin() + static_cast<long>(offset_in_record),
                      rec.begin() + static_cast<long>(offset_in_record + k));
      offset_in_record += k;
      n -= k;
      if (offset_in_record == rec.size()) {
        ++record_at;
        offset_in_record = 0;
      }
    }
    if (credit) {
      ASSERT_TRUE(tx.ack(slot_cursor()));
    }
  }
  // The slot cursor past the records consumed whole: the sender's own record sizes.
  uint64_t slot_cursor() const {
    uint64_t c = 0;
    for (size_t i = 0; i < record_at; ++i) c += slot_of[i];
    return c;
  }
};

TEST(TcpResume, ResentStreamContinuesExactlyWhereTheReceiverStopped) {
  std::mt19937 rng(7);
  for (int round = 0; round < 400; ++round) {
    Pair p;
    p.tcp_before = rng() % 5000;
    p.sent.assign(p.tcp_before, 0x5a);  // what TCP carried; the receiver got it too
    p.received = p.sent;
    const int steps = static_cast<int>(rng() % 60);
    for (int s = 0; s < steps; ++s) {
      if (rng() % 2) {
        p.write(rng, rng() % 3 == 0 ? ring::kWhole : 1 + rng() % 3000);
      } else {
        p.read(rng() % 4000, rng() % 4 != 0);  // now and then a credit is still on its way
      }
    }
    // A send queue the ring had no room for: bytes the sender holds beyond its records.
    std::vector<uint8_t> queue(rng() % 3000);
    for (auto& b : queue) b = static_cast<uint8_t>(rng());
    p.sent.insert(p.sent.end(), queue.begin(), queue.end());

    // The sender resends from the peer's last credit: header, records' payload, queue.
    std::vector<uint8_t> wire(kHeaderSize);
    const int64_t resent = resend(p.staging.data(), kCap, p.tx.acked(), p.tx.written(),
                                  [&](const uint8_t* b, uint64_t n) { wire.insert(wire.end(), b, b + n); });
    ASSERT_GE(resent, 0) << round;
    encode(Header{resend_offset(p.tcp_before + p.ring_payload, static_cast<uint64_t>(resent))}, wire.data());
    wire.insert(wire.end(), queue.begin(), queue.end());

    // The receiver leaves its ring wherever its program stopped, mid-record too.
    Resume r(p.received.size(), kCap);
    size_t at = 0;
    Resume::Step step = Resume::Step::more;
    while (step == Resume::Step::more && at < wire.size()) {
      size_t used = 0;
      const size_t piece = std::min<size_t>(wire.size() - at, 1 + rng() % 700);  // TCP's segments
      step = r.take(wire.data() + at, piece, used);
      at += used;
      if (step == Resume::Step::more) {
        ASSERT_EQ(used, piece);
      }
    }
    ASSERT_NE(step, Resume::Step::broken) << round;
    if (step == Resume::Step::more) {
      ASSERT_EQ(at, wire.size());  // nothing left after the overlap
    }
    p.received.insert(p.received.end(), wire.begin() + static_cast<long>(at), wire.end());
    ASSERT_EQ(p.received, p.sent) << round;
  }
}

TEST(TcpResume, StagingThatDoesNotHoldTheRangeIsRefused) {
  std::vector<uint8_t> staging(kCap, 0);
  EXPECT_EQ(resend(staging.data(), kCap, 0, 0, [](const uint8_t*, uint64_t) {}), 0);
  EXPECT_EQ(resend(staging.data(), kCap, 0, 64, [](const uint8_t*, uint64_t) {}), -1);  // nothing landed there
  ring::TxWindow tx(kCap);
  ring::Record r[ring::kMaxRecords];
  ASSERT_EQ(ring::plan(tx, 100, kCap, r), 1);
  memset(staging.data() + r[0].payload_offset(), 1, 100);
  ring::seal(staging.data(), r[0]);
  EXPECT_EQ(resend(staging.data(), kCap, 0, r[0].size(), [](const uint8_t*, uint64_t) {}), 100);
  EXPECT_EQ(resend(staging.data(), kCap, 0, 64, [](const uint8_t*, uint64_t) {}), -1);  // ends mid-record
  EXPECT_EQ(resend(staging.data(), kCap, 0, kCap + 64, [](const uint8_t*, uint64_t) {}), -1);  // more than a ring
}

}  // namespace
}  // namespace ferry::tcp_resume
