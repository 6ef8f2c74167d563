#include "core/refusals.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <gtest/gtest.h>

#include <cstring>

namespace ferry::refusals {
namespace {

// An address of either family: IPv6 when it has a colon.
sockaddr_storage addr(const char* ip, uint16_t port) {
  sockaddr_storage s{};
  if (strchr(ip, ':')) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &a->sin6_addr);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, ip, &a->sin_addr);
  }
  return s;
}

TEST(Refusals, AKeyIsTheAddressAndPortWithMappedAddressesAsIPv4) {
  EXPECT_EQ(key_of(addr("198.18.0.1", 80)), key_of(addr("::ffff:198.18.0.1", 80)));
  EXPECT_FALSE(key_of(addr("198.18.0.1", 80)) == key_of(addr("198.18.0.1", 81)));
  EXPECT_FALSE(key_of(addr("198.18.0.1", 80)) == key_of(addr("198.18.0.2", 80)));
  EXPECT_FALSE(key_of(addr("2001:db8::1", 80)) == key_of(addr("2001:db8::2", 80)));
}

TEST(Refusals, APeerIsRememberedUntilItsTime) {
  Table t;
  const Key k = key_of(addr("198.18.0.1", 5432));
  EXPECT_FALSE(t.holds(k, 0));
  t.note(k, 100);
  EXPECT_TRUE(t.holds(k, 99));
  EXPECT_FALSE(t.holds(k, 100));
  EXPECT_FALSE(t.holds(key_of(addr("198.18.0.1", 5433)), 50));
  t.note(k, 300);  // noted again: its own slot, a later time
  EXPECT_TRUE(t.holds(k, 200));
}

TEST(Refusals, AFullTableGivesUpTheSlotThatExpiresFirst) {
  Table t;
  for (int i = 0; i < Table::kSlots; ++i) t.note(key_of(addr("198.18.0.1", static_cast<uint16_t>(1000 + i))), 1000 + i);
  const Key first = key_of(addr("198.18.0.1", 1000));
  const Key second = key_of(addr("198.18.0.1", 1001));
  const Key fresh = key_of(addr("198.18.0.9", 1));
  t.note(fresh, 5000);
  EXPECT_TRUE(t.holds(fresh, 10));
  EXPECT_FALSE(t.holds(first, 10));  // expired first, so it made room
  EXPECT_TRUE(t.holds(second, 10));
}

TEST(Refusals, TheProcessTableRemembersWhatItWasTold) {
  const auto peer = addr("198.18.0.77", 6379);
  EXPECT_FALSE(refused_lately(peer));
  note_refusal(peer);
  EXPECT_TRUE(refused_lately(peer));
  EXPECT_TRUE(refused_lately(addr("::ffff:198.18.0.77", 6379)));
  EXPECT_FALSE(refused_lately(addr("198.18.0.77", 6380)));
}

TEST(Askers, OneAsksEachServerTheOthersWaitForItsAnswer) {
  Askers<int> q;
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2), c = std::make_shared<int>(3);
  auto d = std::make_shared<int>(4);
  const Key plain = key_of(addr("198.18.0.1", 6379)), other = key_of(addr("198.18.0.1", 6380));
  EXPECT_TRUE(q.ask(plain, a));
  EXPECT_FALSE(q.ask(plain, b));
  EXPECT_FALSE(q.ask(plain, c));
  EXPECT_TRUE(q.ask(other, d));  // another server: asked at once
  EXPECT_EQ(q.asker_of(plain), a.get());
  EXPECT_EQ(q.asker_of(other), d.get());
  EXPECT_TRUE(q.answered(b.get()).empty());  // a waiter answers nothing
  auto waiters = q.answered(a.get());
  ASSERT_EQ(waiters.size(), 2u);
  EXPECT_EQ(waiters[0].lock(), b);
  EXPECT_EQ(waiters[1].lock(), c);
  EXPECT_EQ(q.asker_of(plain), nullptr);
  EXPECT_TRUE(q.answered(a.get()).empty());  // answered once
  EXPECT_TRUE(q.ask(plain, b));  // the next question is b's
  EXPECT_TRUE(q.answered(d.get()).empty());
}

TEST(Askers, AWaiterGoneMeanwhileIsHandedBackExpired) {
  Askers<int> q;
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2);
  const Key k = key_of(addr("198.18.0.1", 6379));
  EXPECT_TRUE(q.ask(k, a));
  EXPECT_FALSE(q.ask(k, b));
  b.reset();
  auto waiters = q.answered(a.get());
  ASSERT_EQ(waiters.size(), 1u);
  EXPECT_TRUE(waiters[0].expired());
}

}  // namespace
}  // namespace ferry::refusals
