#include "core/ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ferry::ring {
namespace {

constexpr uint64_t kCap = 4096;

TEST(Ring, Capacities) {
  EXPECT_TRUE(valid_capacity(4096));
  EXPECT_TRUE(valid_capacity(uint64_t{1} << 30));
  EXPECT_FALSE(valid_capacity(0));
  EXPECT_FALSE(valid_capacity(2048));
  EXPECT_FALSE(valid_capacity(5000));
  EXPECT_FALSE(valid_capacity(uint64_t{1} << 31));
}

TEST(Ring, SpanWithinAndAcrossTheEnd) {
  Span a = span_at(kCap, 100, 50);
  ASSERT_EQ(a.count, 1);
  EXPECT_EQ(a.part[0].offset, 100u);
  EXPECT_EQ(a.part[0].length, 50u);
  Span b = span_at(kCap, kCap * 3 + 4000, 200);  // wraps: 96 at the end, 104 at 0
  ASSERT_EQ(b.count, 2);
  EXPECT_EQ(b.part[0].offset, 4000u);
  EXPECT_EQ(b.part[0].length, 96u);
  EXPECT_EQ(b.part[1].offset, 0u);
  EXPECT_EQ(b.part[1].length, 104u);
  EXPECT_EQ(b.total(), 200u);
  Span c = span_at(kCap, 4000, 96);  // ends exactly at the end: one segment
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(span_at(kCap, 5, 0).count, 0);
  Span full = span_at(kCap, 10, kCap);  // the whole ring from an offset
  ASSERT_EQ(full.count, 2);
  EXPECT_EQ(full.total(), kCap);
}

TEST(Ring, SenderStopsWhenTheRingIsFull) {
  TxWindow tx(kCap);
  EXPECT_EQ(tx.space(), kCap);
  EXPECT_EQ(tx.reserve(10000).total(), kCap);
  tx.commit(kCap);
  EXPECT_EQ(tx.space(), 0u);
  EXPECT_EQ(tx.reserve(1).count, 0);
  ASSERT_TRUE(tx.ack(1000));
  EXPECT_EQ(tx.space(), 1000u);
  Span s = tx.reserve(5000);  // the freed bytes are at the start of the ring
  ASSERT_EQ(s.count, 1);
  EXPECT_EQ(s.part[0].offset, 0u);
  EXPECT_EQ(s.part[0].length, 1000u);
}

TEST(Ring, BadAcksAreRefused) {
  TxWindow tx(kCap);
  tx.commit(100);
  EXPECT_FALSE(tx.ack(101));  // beyond what was written
  ASSERT_TRUE(tx.ack(50));
  EXPECT_FALSE(tx.ack(49));  // backwards
  EXPECT_TRUE(tx.ack(50));   // repeated: harmless
  EXPECT_EQ(tx.acked(), 50u);
}

TEST(Ring, ReceiverRefusesOverrun) {
  RxRing rx(kCap);
  EXPECT_TRUE(rx.land(kCap - 1));
  EXPECT_FALSE(rx.land(2));
  EXPECT_TRUE(rx.land(1));
  EXPECT_EQ(rx.readable(), kCap);
  rx.consume(kCap + 10);  // consuming more than readable stops at readable
  EXPECT_EQ(rx.readable(), 0u);
  EXPECT_EQ(rx.consumed(), kCap);
}

TEST(Ring, CreditReturnsAreBatched) {
  RxRing rx(kCap);
  rx.land(3000);
  rx.consume(kCap / 4 - 1);
  EXPECT_FALSE(rx.credit_due(false));
  EXPECT_TRUE(rx.credit_due(true));  // a blocked sender gets it at once
  rx.consume(1);
  EXPECT_TRUE(rx.credit_due(false));
  EXPECT_EQ(rx.take_credit(), kCap / 4);
  EXPECT_FALSE(rx.credit_due(true));  // nothing new to return
}

TEST(Ring, CursorsWrapAround2To64) {
  const uint64_t start = ~uint64_t{0} - 100;
  TxWindow tx(kCap, start);
  RxRing rx(kCap, start);
  Span s = tx.reserve(300);
  EXPECT_EQ(s.total(), 300u);
  tx.commit(300);
  ASSERT_TRUE(rx.land(300));
  EXPECT_EQ(rx.readable(), 300u);
  EXPECT_LT(tx.written(), start);  // wrapped
  rx.consume(250);
  ASSERT_TRUE(tx.ack(rx.take_credit()));
  EXPECT_EQ(tx.in_flight(), 50u);
  EXPECT_FALSE(tx.ack(start - 1));
}

// A whole stream through the two halves with a real byte array standing in for the
// peer's memory: random write and read sizes, every byte checked.
TEST(Ring, RandomStreamArrivesIntact) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> memory(kCap);
  TxWindow tx(kCap, ~uint64_t{0} - 5000);
  RxRing rx(kCap, tx.written());
  uint64_t sent = 0, received = 0;
  const uint64_t total = 3'000'000;
  auto byte_at = [](uint64_t i) { return static_cast<uint8_t>(i * 2654435761u >> 13); };
  while (received < total) {
    uint64_t want = std::min<uint64_t>(rng() % 3000, total - sent);
    Span w = tx.reserve(want);
    ASSERT_LE(w.count, 2);
    for (int p = 0; p < w.count; ++p)
      for (uint64_t i = 0; i < w.part[p].length; ++i) memory[w.part[p].offset + i] = byte_at(sent++);
    tx.commit(w.total());
    ASSERT_TRUE(rx.land(w.total()));
    Span r = rx.peek(rng() % 4000);
    for (int p = 0; p < r.count; ++p) {
      for (uint64_t i = 0; i < r.part[p].length; ++i) {
        ASSERT_EQ(memory[r.part[p].offset + i], byte_at(received++));
      }
    }
    rx.consume(r.total());
    if (rx.credit_due(w.total() < want)) {
      ASSERT_TRUE(tx.ack(rx.take_credit()));
    }
  }
  EXPECT_EQ(sent, total);
}

}  // namespace
}  // namespace ferry::ring
