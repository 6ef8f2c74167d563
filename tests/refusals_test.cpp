#include "core/conn/refusals.h"

#include "core/base/user_shm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

TEST(Refusals, TheUsersTableRemembersWhatItWasTold) {
  // A port no earlier run noted: the user's table outlives a test by kMemoryNs.
  auto port = static_cast<uint16_t>(20000 + getpid() % 20000);
  while (refused_lately(addr("198.18.0.77", port)) || refused_lately(addr("198.18.0.78", port))) ++port;
  const auto peer = addr("198.18.0.77", port);
  note_refusal(peer);
  EXPECT_TRUE(refused_lately(peer));
  EXPECT_TRUE(refused_lately(addr("::ffff:198.18.0.77", port)));
  EXPECT_FALSE(refused_lately(addr("198.18.0.78", port)));
}

// Two mappings of one file, as two processes of the user would have.
TEST(Refusals, ATableInAFileIsSharedByItsMappings) {
  char dir[] = "/tmp/refusals_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/table";
  auto* a = static_cast<Table*>(user_shm::map(path.c_str(), sizeof(Table)));
  auto* b = static_cast<Table*>(user_shm::map(path.c_str(), sizeof(Table)));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Key k = key_of(addr("2001:db8::7", 5432));
  EXPECT_FALSE(b->holds(k, 0));  // a new file is an empty table
  a->note(k, 100);
  EXPECT_TRUE(b->holds(k, 50));
  EXPECT_FALSE(b->holds(k, 100));
  munmap(a, sizeof(Table));
  munmap(b, sizeof(Table));
  unlink(path.c_str());
  rmdir(dir);
}

// Notes and looks from several threads at once: a look finds no key that was never
// noted, and the table keeps what was (under TSan: no data race).
TEST(Refusals, NotesAndLooksFromManyThreadsAtOnce) {
  Table t;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i)
        t.note(key_of(addr(w ? "198.18.0.1" : "2001:db8::1", static_cast<uint16_t>(i % 64))), INT64_MAX);
    });
  for (int i = 0; i < 20000; ++i) {
    EXPECT_FALSE(t.holds(key_of(addr("198.18.0.1", 100)), 0));
    EXPECT_FALSE(t.holds(key_of(addr("2001:db8::1", 100)), 0));
  }
  stop = true;
  for (auto& w : writers) w.join();
  // Whatever the writers left, a table full of them still takes a new note.
  const Key late = key_of(addr("198.18.0.9", 9));
  EXPECT_FALSE(t.holds(late, 0));
  t.note(late, INT64_MAX);
  EXPECT_TRUE(t.holds(late, 0));
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
