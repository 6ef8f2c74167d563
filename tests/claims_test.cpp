#include "core/conn/claims.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

namespace ferry::claims {
namespace {

TEST(Claims, ClaimedKeyIsFoundUntilItExpires) {
  auto t = std::make_unique<Table>();
  Claim c;
  EXPECT_FALSE(t->find("198.18.0.2|40000|80", 0, c));
  ASSERT_TRUE(t->claim("198.18.0.2|40000|80", {123, 5000}, 0, 100));
  ASSERT_TRUE(t->find("198.18.0.2|40000|80", 99, c));
  EXPECT_EQ(c.pid, 123);
  EXPECT_EQ(c.port, 5000);
  EXPECT_FALSE(t->find("198.18.0.2|40000|80", 100, c));  // expired
  EXPECT_FALSE(t->find("198.18.0.2|40000|8", 0, c));     // a prefix is another key
  EXPECT_FALSE(t->find("198.18.0.2|40000|800", 0, c));
}

TEST(Claims, KeysAreBytesZerosAmongThem) {
  auto t = std::make_unique<Table>();
  const std::string key("4\xc6\x12\x00\x02\x9c\x40\x00\x50", 9);
  ASSERT_TRUE(t->claim(key, {7, 1}, 0, 100));
  Claim c;
  ASSERT_TRUE(t->find(key, 1, c));
  EXPECT_EQ(c.pid, 7);
  EXPECT_FALSE(t->find(key.substr(0, 3), 1, c));  // up to the first zero: another key
  EXPECT_FALSE(t->find(key + std::string(1, '\0'), 1, c));
  t->drop(key.substr(0, 3), 7);
  EXPECT_TRUE(t->find(key, 1, c));
  t->drop(key, 7);
  EXPECT_FALSE(t->find(key, 1, c));
}

TEST(Claims, NewerClaimReplacesOlderOne) {
  auto t = std::make_unique<Table>();
  ASSERT_TRUE(t->claim("k", {1, 10}, 0, 100));
  ASSERT_TRUE(t->claim("k", {2, 20}, 5, 100));
  Claim c;
  ASSERT_TRUE(t->find("k", 6, c));
  EXPECT_EQ(c.pid, 2);
  t->drop("k", 1);  // not the claimer's any more: nothing happens
  ASSERT_TRUE(t->find("k", 6, c));
  t->drop("k", 2);
  EXPECT_FALSE(t->find("k", 6, c));
}

TEST(Claims, FullNeighbourhoodRefusesThenReusesExpiredSlots) {
  auto t = std::make_unique<Table>();
  // More live keys than any neighbourhood holds: some claims must be refused, and
  // every accepted one must stay findable.
  int accepted = 0;
  for (int i = 0; i < static_cast<int>(Table::kSlots) + 64; ++i) {
    std::string key = "10.0.0.1|" + std::to_string(i) + "|80";
    if (t->claim(key, {i + 1, 1}, 0, 1000)) {
      ++accepted;
      Claim c;
      ASSERT_TRUE(t->find(key, 1, c)) << key;
      EXPECT_EQ(c.pid, i + 1);
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, static_cast<int>(Table::kSlots));
  // Once they expired every key finds room again.
  for (int i = 0; i < 256; ++i) EXPECT_TRUE(t->claim("later|" + std::to_string(i), {7, 1}, 1000, 2000));
  EXPECT_FALSE(t->claim(std::string(kKeySize, 'x'), {7, 1}, 0, 10));  // too long
  EXPECT_FALSE(t->claim("nobody", {0, 1}, 0, 10));                     // pid 0 means free
}

TEST(Claims, ChildClaimsParentFinds) {
  Table* t = make_shared();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(make_shared(), t);
  EXPECT_EQ(shared(), t);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(t->claim("198.18.0.9|1234|5432", {getpid(), 4242}, 0, 1000) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Claim c;
  ASSERT_TRUE(t->find("198.18.0.9|1234|5432", 1, c));
  EXPECT_EQ(c.pid, child);
  EXPECT_EQ(c.port, 4242);
}

// Unrelated processes (here: two mappings, as two processes would have) share a named
// table; a file anyone else could read or write is not trusted.
TEST(Claims, NamedTableIsSharedAndMustBePrivate) {
  char dir[] = "/tmp/claims_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/table";
  Table* a = map_named(path.c_str());
  Table* b = map_named(path.c_str());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(a, b);
  Claim c;
  EXPECT_FALSE(b->find("198.18.0.2|40000|80", 0, c));  // a new file is an empty table
  ASSERT_TRUE(a->claim("198.18.0.2|40000|80", {321, 6000}, 0, 100));
  ASSERT_TRUE(b->find("198.18.0.2|40000|80", 1, c));
  EXPECT_EQ(c.pid, 321);
  EXPECT_EQ(c.port, 6000);
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(map_named(path.c_str()), nullptr);
  const std::string link = std::string(dir) + "/link";
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  EXPECT_EQ(map_named(link.c_str()), nullptr);  // never through a symbolic link
  munmap(a, sizeof(Table));
  munmap(b, sizeof(Table));
  unlink(link.c_str());
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace ferry::claims
