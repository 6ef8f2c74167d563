#include "core/base/rules.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace ferry::rules {
namespace {

sockaddr_storage v4(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto& in = reinterpret_cast<sockaddr_in&>(ss);
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  inet_pton(AF_INET, ip, &in.sin_addr);
  return ss;
}

sockaddr_storage v6(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto& in = reinterpret_cast<sockaddr_in6&>(ss);
  in.sin6_family = AF_INET6;
  in.sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &in.sin6_addr);
  return ss;
}

std::vector<Rule> parse_ok(const char* text) {
  std::vector<std::string> problems;
  auto rules = parse(text, "f", problems);
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
  return rules;
}

// The action of the first rule that matches, "none" when none does.
std::string decide(const std::vector<Rule>& rules, Role role, const sockaddr_storage& local,
                   const sockaddr_storage& peer, const char* name = "prog", const char* path = "/usr/bin/prog") {
  const Rule* r = match(rules, Subject{name, path, role}, local, peer);
  if (!r) return "none";
  return r->action == Action::tcp ? "tcp" : "rdma";
}

TEST(Rules, EveryConditionAndSetting) {
  auto rules = parse_ok(
      "# comment\n"
      "\n"
      "tcp role=server local-port=5432   # the database\n"
      "  rdma program=redis-* ring=1m\n"
      "tcp remote=10.1.0.0/16 remote-port=80-89\n"
      "tcp program=/opt/*/bin/tool\n"
      "tcp local=fd00::/8\n"
      "rdma\n");
  ASSERT_EQ(rules.size(), 6u);
  EXPECT_EQ(rules[0].line, 3);
  EXPECT_EQ(rules[1].ring_size, 1u << 20);
  const auto here = v4("198.18.0.1", 5432), there = v4("198.18.0.2", 40000);
  EXPECT_EQ(decide(rules, Role::server, here, there), "tcp");
  EXPECT_EQ(decide(rules, Role::client, here, there), "rdma");  // the client's local port is no server's
  EXPECT_EQ(decide(rules, Role::server, here, there, "redis-server", "/usr/bin/redis-server"), "tcp");  // first wins
  EXPECT_EQ(decide(rules, Role::client, v4("198.18.0.1", 1234), v4("198.18.0.2", 6379), "redis-cli"), "rdma");
  EXPECT_EQ(decide(rules, Role::client, v4("10.0.0.1", 1234), v4("10.1.2.3", 85)), "tcp");
  EXPECT_EQ(decide(rules, Role::client, v4("10.0.0.1", 1234), v4("10.1.2.3", 90)), "rdma");
  EXPECT_EQ(decide(rules, Role::client, v4("10.0.0.1", 1234), v4("10.2.2.3", 85)), "rdma");
  EXPECT_EQ(decide(rules, Role::client, here, there, "tool", "/opt/x/bin/tool"), "tcp");  // by path
  EXPECT_EQ(decide(rules, Role::client, here, there, "tool", "/usr/bin/tool"), "rdma");
  EXPECT_EQ(decide(rules, Role::client, v6("fd12::1", 1), v6("fd12::2", 2)), "tcp");
  EXPECT_EQ(decide(rules, Role::client, v6("fe80::1", 1), v6("fe80::2", 2)), "rdma");
}

TEST(Rules, NoRuleMatchesNothing) {
  auto rules = parse_ok("tcp local-port=1-1023\n");
  EXPECT_EQ(decide(rules, Role::client, v4("198.18.0.1", 40000), v4("198.18.0.2", 80)), "none");
  EXPECT_EQ(decide({}, Role::client, v4("198.18.0.1", 40000), v4("198.18.0.2", 80)), "none");
}

TEST(Rules, PrefixesCompareOnlyTheirBits) {
  auto rules = parse_ok("tcp remote=198.18.128.0/17\ntcp remote=192.0.2.7\n");
  const auto l = v4("198.18.0.1", 1);
  EXPECT_EQ(decide(rules, Role::client, l, v4("198.18.200.1", 1)), "tcp");
  EXPECT_EQ(decide(rules, Role::client, l, v4("198.18.127.255", 1)), "none");
  EXPECT_EQ(decide(rules, Role::client, l, v4("192.0.2.7", 1)), "tcp");
  EXPECT_EQ(decide(rules, Role::client, l, v4("192.0.2.8", 1)), "none");
  // An IPv4-mapped IPv6 peer is the IPv4 address.
  EXPECT_EQ(decide(rules, Role::client, v6("::ffff:198.18.0.1", 1), v6("::ffff:192.0.2.7", 1)), "tcp");
  // An IPv4 prefix never matches a native IPv6 address, nor the reverse.
  auto six = parse_ok("tcp remote=::/0\n");
  EXPECT_EQ(decide(six, Role::client, l, v4("192.0.2.7", 1)), "none");
  EXPECT_EQ(decide(six, Role::client, v6("fd00::1", 1), v6("fd00::2", 1)), "tcp");
}

TEST(Rules, MalformedLinesAreNamedAndLeftOut) {
  std::vector<std::string> problems;
  auto rules = parse(
      "tcp role=server\n"
      "accelerate everything\n"
      "tcp role=both\n"
      "tcp local=300.1.1.1\n"
      "tcp local=10.0.0.0/33\n"
      "tcp local-port=90-80\n"
      "tcp local-port=70000\n"
      "tcp ring=64k\n"
      "rdma ring=3000\n"
      "rdma color=blue\n"
      "rdma role=client role=server\n"
      "rdma program=\n"
      "rdma local-port\n"
      "rdma\x01 role=client\n"
      "rdma role=client\n",
      "/etc/ferry/ferry.conf", problems);
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].line, 1);
  EXPECT_EQ(rules[1].line, 15);
  ASSERT_EQ(problems.size(), 13u);
  EXPECT_EQ(problems[0].rfind("/etc/ferry/ferry.conf:2: ", 0), 0u) << problems[0];
  EXPECT_EQ(problems[12].rfind("/etc/ferry/ferry.conf:14: control characters", 0), 0u) << problems[12];
  for (const auto& p : problems) EXPECT_EQ(p.find('\x01'), std::string::npos);
}

TEST(Rules, HostileInputIsBounded) {
  std::vector<std::string> problems;
  std::string huge(100000, 'x');
  auto rules = parse("tcp program=" + huge + "\nrdma\n", "f", problems);
  ASSERT_EQ(rules.size(), 1u);  // the long line is left out, the next one stands
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_LT(problems[0].size(), 200u);
  std::string binary;
  for (int i = 0; i < 4096; ++i) binary += static_cast<char>(i * 37);
  problems.clear();
  parse(binary, "bin", problems);  // nothing to crash on; problems say where
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "tcp local-port=" + std::to_string(i % 65536) + "\n";
  problems.clear();
  EXPECT_EQ(parse(many, "many", problems).size(), 10000u);
  EXPECT_EQ(problems.size(), 1u);
  // A name with a newline cannot write lines of its own into the log.
  problems.clear();
  parse("bogus\n", "a\nb", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].find('\n'), std::string::npos);
}

TEST(Rules, ListenersKeptOffRdmaOnlyWhenEveryConnectionWouldBe) {
  const auto any = v4("0.0.0.0", 5432), other = v4("0.0.0.0", 6379);
  EXPECT_FALSE(listener_may_upgrade(parse_ok("tcp role=server local-port=5432\n"), "pg", "/pg", any));
  EXPECT_TRUE(listener_may_upgrade(parse_ok("tcp role=server local-port=5432\n"), "pg", "/pg", other));
  EXPECT_FALSE(listener_may_upgrade(parse_ok("tcp program=pg\n"), "pg", "/pg", any));
  EXPECT_TRUE(listener_may_upgrade(parse_ok("tcp program=pg\n"), "redis", "/redis", any));
  EXPECT_TRUE(listener_may_upgrade(parse_ok("tcp role=client\n"), "pg", "/pg", any));
  // Some of its connections may match a later rdma rule, or none.
  EXPECT_TRUE(listener_may_upgrade(parse_ok("tcp remote=10.0.0.0/8\n"), "pg", "/pg", any));
  EXPECT_TRUE(listener_may_upgrade(parse_ok("rdma remote=10.0.0.0/8\ntcp\n"), "pg", "/pg", any));
  EXPECT_TRUE(listener_may_upgrade(parse_ok("tcp local=198.18.0.1\n"), "pg", "/pg", any));
  EXPECT_FALSE(listener_may_upgrade(parse_ok("tcp remote=10.0.0.0/8\ntcp\n"), "pg", "/pg", any));
  EXPECT_TRUE(listener_may_upgrade({}, "pg", "/pg", any));
}

TEST(Rules, LoadsTheNamedFileAndSaysWhyNot) {
  char path[] = "/tmp/ferry-rules-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const char text[] = "tcp role=server\nbogus\n";
  ASSERT_EQ(write(fd, text, sizeof text - 1), static_cast<ssize_t>(sizeof text - 1));
  close(fd);
  std::vector<std::string> problems;
  load(path, false, problems);
  EXPECT_EQ(active().size(), 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(":2: "), std::string::npos) << problems[0];
  EXPECT_FALSE(program_name().empty());
  // A secure-execution process reads only the default file, never the one its invoker named.
  problems.clear();
  load(path, true, problems);
  if (access(kDefaultFile, F_OK) != 0) {
    EXPECT_TRUE(active().empty());
  }
  unlink(path);
  problems.clear();
  load(path, false, problems);  // missing
  EXPECT_TRUE(active().empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("No such file"), std::string::npos) << problems[0];
  problems.clear();
  load("/tmp", false, problems);  // not a file
  EXPECT_TRUE(active().empty());
  EXPECT_EQ(problems.size(), 1u);
  if (geteuid() == 0) return;  // root reads anything
  char locked[] = "/tmp/ferry-rules-XXXXXX";
  const int lf = mkstemp(locked);
  ASSERT_GE(lf, 0);
  fchmod(lf, 0);
  close(lf);
  problems.clear();
  load(locked, false, problems);
  EXPECT_EQ(problems.size(), 1u);
  unlink(locked);
}

}  // namespace
}  // namespace ferry::rules
