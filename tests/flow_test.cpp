#include "core/proto/flow.h"

#include <gtest/gtest.h>

namespace ferry::flow {
namespace {

TEST(Flow, BlockedIsToldOncePerCursor) {
  Sender s;
  EXPECT_TRUE(s.tell_blocked(100));
  EXPECT_FALSE(s.tell_blocked(100));
  EXPECT_TRUE(s.tell_blocked(200));
  EXPECT_FALSE(s.tell_blocked(200));
}

TEST(Flow, BlockedSenderGetsCreditForAnyFreedByte) {
  Receiver r;
  ring::RxRing ring(4096);
  ASSERT_TRUE(ring.land(1024));
  ring.consume(64);
  EXPECT_FALSE(r.credit_due(ring));  // less than a quarter freed
  r.on_blocked();
  EXPECT_TRUE(r.credit_due(ring));
  ring.take_credit();
  r.credit_given();
  ring.consume(64);
  EXPECT_FALSE(r.credit_due(ring));
}

TEST(Flow, SleepBeforeTheLastWritesIsWokenAtOnce) {
  ring::TxWindow tx(4096);
  tx.commit(128);
  Sender s;
  EXPECT_EQ(s.on_sleep(64, 1, tx), Sender::SleepAnswer::wake_now);
  EXPECT_FALSE(s.next_write_wakes());
}

TEST(Flow, SleepAtTheLastWriteMarksTheNextWrites) {
  ring::TxWindow tx(4096);
  tx.commit(128);
  Sender s;
  EXPECT_EQ(s.on_sleep(128, 3, tx), Sender::SleepAnswer::waking_writes);
  EXPECT_TRUE(s.next_write_wakes());
  EXPECT_TRUE(s.next_write_wakes());
  EXPECT_TRUE(s.next_write_wakes());
  EXPECT_FALSE(s.next_write_wakes());
}

TEST(Flow, ForgedSleepsAreViolations) {
  ring::TxWindow tx(4096);
  tx.commit(128);
  ASSERT_TRUE(tx.ack(64));
  Sender s;
  EXPECT_EQ(s.on_sleep(192, 1, tx), Sender::SleepAnswer::malformed);  // never written
  EXPECT_EQ(s.on_sleep(0, 1, tx), Sender::SleepAnswer::malformed);    // before the acked cursor
  EXPECT_EQ(s.on_sleep(128, 0, tx), Sender::SleepAnswer::malformed);
  EXPECT_EQ(s.on_sleep(128, kMostSleepWrites + 1, tx), Sender::SleepAnswer::malformed);
  EXPECT_EQ(s.on_sleep(128, kMostSleepWrites, tx), Sender::SleepAnswer::waking_writes);
}

// One sleep at a time: the next is told only after the wake or all waking writes.
TEST(Flow, ReceiverAsksAgainOnlyOnceAnswered) {
  Receiver r;
  uint32_t k = r.sleep_count(0);
  ASSERT_GT(k, 0u);
  r.slept(k);
  EXPECT_EQ(r.sleep_count(0), 0u);
  for (uint32_t i = 0; i + 1 < k; ++i) r.on_waking_write();
  EXPECT_TRUE(r.asked());
  r.on_waking_write();
  EXPECT_FALSE(r.asked());
  k = r.sleep_count(0);
  ASSERT_GT(k, 0u);
  r.slept(k);
  r.on_wake();
  EXPECT_FALSE(r.asked());
}

// A receiver that sleeps between few records asks for more waking writes per sleep (up
// to the most), one that finds many records by polling for fewer.
TEST(Flow, WakingWritesFollowHowOftenTheReceiverSleeps) {
  Receiver r;
  uint64_t records = 0;
  uint32_t k = 0;
  for (int i = 0; i < 20; ++i) {
    k = r.sleep_count(++records);
    r.slept(k);
    r.on_wake();
  }
  EXPECT_EQ(k, kMostSleepWrites);
  for (int i = 0; i < 20; ++i) {
    records += 1000;
    k = r.sleep_count(records);
    r.slept(k);
    r.on_wake();
  }
  EXPECT_EQ(k, 1u);
}

// Both sides count the waking writes, so a receiver's sleep is always answered: by a
// wake, or by as many waking writes as it asked for.
TEST(Flow, EverySleepIsAnswered) {
  ring::TxWindow tx(1 << 16);
  Sender s;
  Receiver r;
  uint64_t landed = 0;
  for (int round = 0; round < 1000; ++round) {
    const uint32_t k = r.sleep_count(round);
    if (k == 0) continue;
    r.slept(k);
    // The sender may have written past where the receiver looked.
    const uint64_t looked = landed;
    if (round % 3 == 0) {
      tx.commit(64);
      landed += 64;
    }
    switch (s.on_sleep(looked, k, tx)) {
      case Sender::SleepAnswer::wake_now: r.on_wake(); break;
      case Sender::SleepAnswer::waking_writes:
        while (s.next_write_wakes()) {
          tx.commit(64);
          landed += 64;
          r.on_waking_write();
        }
        break;
      case Sender::SleepAnswer::malformed: FAIL();
    }
    ASSERT_FALSE(r.asked());
    ASSERT_TRUE(tx.ack(tx.written()));
  }
}

TEST(Prober, ProbesOnlyAPeerSilentForAWholeTickWhileBytesWait) {
  Prober p;
  EXPECT_FALSE(p.tick(false, 0));  // nothing waits
  EXPECT_FALSE(p.tick(true, 0));   // bytes began to wait within this tick
  EXPECT_TRUE(p.tick(true, 0));    // a whole tick without a credit
  EXPECT_TRUE(p.tick(true, 0));    // and every tick after it
  EXPECT_FALSE(p.tick(true, 4096));  // a credit came: the peer is there
  EXPECT_TRUE(p.tick(true, 4096));
  EXPECT_FALSE(p.tick(false, 4096));  // the bytes went
  EXPECT_FALSE(p.tick(true, 4096));   // waiting again starts a fresh tick
}

TEST(Prober, AnIdleConnectionIsNeverProbed) {
  Prober p;
  for (int i = 0; i < 100; ++i) ASSERT_FALSE(p.tick(false, 0));
}

}  // namespace
}  // namespace ferry::flow
