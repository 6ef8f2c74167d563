#include "core/proto/ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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

TEST(Ring, SenderStopsWhenTheRingIsFull) {
  TxWindow tx(kCap);
  EXPECT_EQ(tx.space(), kCap);
  tx.commit(kCap);
  EXPECT_EQ(tx.space(), 0u);
  EXPECT_EQ(tx.in_flight(), kCap);
  ASSERT_TRUE(tx.ack(1000));
  EXPECT_EQ(tx.space(), 1000u);
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
  tx.commit(300);
  ASSERT_TRUE(rx.land(300));
  EXPECT_EQ(rx.readable(), 300u);
  EXPECT_LT(tx.written(), start);  // wrapped
  rx.consume(250);
  ASSERT_TRUE(tx.ack(rx.take_credit()));
  EXPECT_EQ(tx.in_flight(), 50u);
  EXPECT_FALSE(tx.ack(start - 1));
}

// A long stream through the two halves: random write and read sizes, credits as the
// receiver decides; the cursors always agree and never overrun.
TEST(Ring, RandomStreamKeepsTheCursorsInStep) {
  std::mt19937_64 rng(7);
  TxWindow tx(kCap, ~uint64_t{0} - 5000);
  RxRing rx(kCap, tx.written());
  uint64_t sent = 0, received = 0;
  const uint64_t total = 3'000'000;
  while (received < total) {
    const uint64_t want = std::min<uint64_t>(rng() % 3000, total - sent);
    const uint64_t n = std::min(want, tx.space());
    tx.commit(n);
    sent += n;
    ASSERT_TRUE(rx.land(n));
    ASSERT_LE(tx.in_flight(), kCap);
    ASSERT_EQ(rx.produced(), tx.written());
    const uint64_t r = std::min<uint64_t>(rng() % 4000, rx.readable());
    rx.consume(r);
    received += r;
    if (rx.credit_due(n < want)) {
      ASSERT_TRUE(tx.ack(rx.take_credit()));
    }
    ASSERT_EQ(tx.in_flight() - rx.readable(), rx.consumed() - tx.acked());
  }
  EXPECT_EQ(sent, total);
}

}  // namespace
}  // namespace ferry::ring
