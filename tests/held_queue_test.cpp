#include "core/proto/held_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry {
namespace {

using Q = HeldQueue<int, int>;

TEST(HeldQueue, CapsTheTotalAndEachSource) {
  Q q(4, 2);
  EXPECT_TRUE(q.push(1, "k1", "a", 10));
  EXPECT_TRUE(q.push(2, "k2", "a", 10));
  EXPECT_FALSE(q.push(3, "k3", "a", 10));  // a's share is full
  EXPECT_TRUE(q.push(4, "k4", "b", 10));
  EXPECT_TRUE(q.push(5, "k5", "c", 10));
  EXPECT_FALSE(q.push(6, "k6", "d", 10));  // the queue is full
  EXPECT_EQ(q.size(), 4u);
  EXPECT_FALSE(q.admits("a"));
  EXPECT_FALSE(q.admits("z"));
  EXPECT_EQ(q.from("a"), 2u);
  EXPECT_EQ(q.from("d"), 0u);
  // A source's share comes back as its entries go.
  EXPECT_EQ(q.take("k1"), 1);
  EXPECT_EQ(q.from("a"), 1u);
  EXPECT_TRUE(q.push(7, "k7", "a", 11));
  EXPECT_FALSE(q.push(8, "k8", "e", 11));
}

TEST(HeldQueue, TakesTheOldestForAKeyOnce) {
  Q q(8, 8);
  q.push(1, "x", "a", 1);
  q.push(2, "y", "a", 2);
  q.push(3, "x", "a", 3);
  EXPECT_EQ(q.take("x"), 1);
  EXPECT_EQ(q.take("x"), 3);
  EXPECT_EQ(q.take("x"), std::nullopt);
  EXPECT_EQ(q.take("z"), std::nullopt);
  EXPECT_EQ(q.size(), 1u);
}

TEST(HeldQueue, ExpiresOnlyWhatIsDueOldestFirst) {
  Q q(8, 8);
  for (int i = 0; i < 5; ++i) q.push(i, "k" + std::to_string(i), i % 2 ? "a" : "b", 10 + i);
  std::vector<int> gone;
  q.expire(9, [&](int v) { gone.push_back(v); });
  EXPECT_TRUE(gone.empty());
  q.expire(12, [&](int v) { gone.push_back(v); });
  EXPECT_EQ(gone, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.next_deadline(), 13);
  EXPECT_EQ(q.from("a"), 1u);
  EXPECT_EQ(q.from("b"), 1u);
  q.expire(100, [&](int v) { gone.push_back(v); });
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.from("a") + q.from("b"), 0u);
}

TEST(HeldQueue, TakeIfKeepsTheRestInOrder) {
  Q q(8, 8);
  for (int i = 0; i < 6; ++i) q.push(i, "k" + std::to_string(i), "s" + std::to_string(i % 3), i);
  std::vector<int> taken;
  q.take_if([&](const std::string&, int& v) {
    if (v % 2) return false;
    taken.push_back(v);
    return true;
  });
  EXPECT_EQ(taken, (std::vector<int>{0, 2, 4}));
  std::vector<int> left;
  q.expire(100, [&](int v) { left.push_back(v); });
  EXPECT_EQ(left, (std::vector<int>{1, 3, 5}));
}

// A flood from one source fills its share; requests from others still get in.
TEST(HeldQueue, AFloodFromOneSourceLeavesRoomForOthers) {
  Q q(1024, 64);
  int refused = 0;
  for (int i = 0; i < 10000; ++i) refused += !q.push(i, "f" + std::to_string(i), "flood", 1);
  EXPECT_EQ(q.size(), 64u);
  EXPECT_EQ(refused, 10000 - 64);
  EXPECT_TRUE(q.push(-1, "real", "client", 1));
  EXPECT_EQ(q.take("real"), -1);
}

}  // namespace
}  // namespace ferry
