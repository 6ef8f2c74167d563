#include "core/conn/endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace ferry::endpoint {
namespace {

constexpr uint8_t kEstablished = 1, kFinWait2 = 5, kCloseWait = 8, kLastAck = 9;

TEST(TcpCountsOf, ConnectingSideLeavesOutItsSyn) {
  TcpCounts c = tcp_counts_of({kEstablished, 101, 40, 20, 15}, true);
  EXPECT_EQ(c.sent, 120u);  // 100 acknowledged, 20 queued
  EXPECT_EQ(c.received, 25u);
  c = tcp_counts_of({kEstablished, 100, 40, 20, 15}, false);
  EXPECT_EQ(c.sent, 120u);
}

TEST(TcpCountsOf, FinsAreNotStreamBytes) {
  // Sent 10 bytes and a FIN, all acknowledged.
  EXPECT_EQ(tcp_counts_of({kFinWait2, 12, 0, 0, 0}, true).sent, 10u);
  // Received 7 bytes and a FIN, 3 of them unread.
  EXPECT_EQ(tcp_counts_of({kCloseWait, 0, 8, 0, 3}, false).received, 4u);
  // Both ways closed, nothing sent or received.
  const TcpCounts c = tcp_counts_of({kLastAck, 1, 1, 1, 0}, true);
  EXPECT_EQ(c.sent, 0u);
  EXPECT_EQ(c.received, 0u);
}

sockaddr_storage v4(const char* ip) {
  sockaddr_storage a{};
  auto* s = reinterpret_cast<sockaddr_in*>(&a);
  s->sin_family = AF_INET;
  inet_pton(AF_INET, ip, &s->sin_addr);
  return a;
}

sockaddr_storage v6(const char* ip) {
  sockaddr_storage a{};
  auto* s = reinterpret_cast<sockaddr_in6*>(&a);
  s->sin6_family = AF_INET6;
  inet_pton(AF_INET6, ip, &s->sin6_addr);
  return a;
}

std::string key(const sockaddr_storage& a, uint16_t peer_port, uint16_t local_port) {
  return conn_key(reinterpret_cast<const sockaddr*>(&a), peer_port, local_port);
}

TEST(ConnKey, MappedAddressIsItsIPv4One) {
  EXPECT_EQ(key(v4("198.18.0.2"), 40000, 80), key(v6("::ffff:198.18.0.2"), 40000, 80));
  EXPECT_NE(key(v4("198.18.0.2"), 40000, 80), key(v6("::198.18.0.2"), 40000, 80));
  // Short enough to need no allocation.
  EXPECT_LE(key(v4("198.18.0.2"), 40000, 80).size(), 15u);
}

TEST(ConnKey, EveryPartTells) {
  const std::string k = key(v4("198.18.0.2"), 40000, 80);
  EXPECT_NE(k, key(v4("198.18.0.3"), 40000, 80));
  EXPECT_NE(k, key(v4("198.18.0.2"), 40001, 80));
  EXPECT_NE(k, key(v4("198.18.0.2"), 40000, 81));
  // The two ports are not interchangeable, nor their bytes.
  EXPECT_NE(key(v4("198.18.0.2"), 80, 40000), key(v4("198.18.0.2"), 40000, 80));
  EXPECT_NE(key(v4("198.18.0.2"), 0x0100, 0), key(v4("198.18.0.2"), 0, 0x0100));
  // Keys of one kind have one length: no key is a prefix of another.
  EXPECT_EQ(key(v4("0.0.0.0"), 0, 0).size(), k.size());
  EXPECT_EQ(key(v6("2001:db8::1"), 1, 2).size(), key(v6("::"), 0, 0).size());
}

// A connected loopback pair; the kernel's own counts are the specification.
struct Pair {
  int client = -1, server = -1;
  Pair() {
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) server = ::accept(l, nullptr, nullptr);
    ::close(l);
  }
  ~Pair() {
    ::close(client);
    ::close(server);
  }
};

void settle(int fd) {
  for (int i = 0; i < 200; ++i) {
    int q = 1;
    if (::ioctl(fd, TIOCOUTQ, &q) == 0 && q == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(TcpCounts, MatchTheBytesEachSideMoved) {
  Pair p;
  ASSERT_GE(p.server, 0);
  const std::string out(1000, 'a');
  ASSERT_EQ(::send(p.client, out.data(), out.size(), 0), 1000);
  char buf[600];
  ASSERT_EQ(::recv(p.server, buf, sizeof buf, MSG_WAITALL), 600);
  ASSERT_EQ(::send(p.server, out.data(), 77, 0), 77);
  settle(p.client);
  settle(p.server);
  uint64_t sent = 0, received = 0;
  ASSERT_TRUE(tcp_counts(p.client, true, sent, received));
  EXPECT_EQ(sent, 1000u);
  EXPECT_EQ(received, 0u);  // 77 arrived, none read
  ASSERT_TRUE(tcp_counts(p.server, false, sent, received));
  EXPECT_EQ(sent, 77u);
  EXPECT_EQ(received, 600u);
}

TEST(TcpCounts, AfterEitherSideShutsDown) {
  Pair p;
  ASSERT_GE(p.server, 0);
  ASSERT_EQ(::send(p.client, "hello", 5, 0), 5);
  ASSERT_EQ(::shutdown(p.client, SHUT_WR), 0);
  settle(p.client);
  char buf[2];
  ASSERT_EQ(::recv(p.server, buf, 2, MSG_WAITALL), 2);
  uint64_t sent = 0, received = 0;
  ASSERT_TRUE(tcp_counts(p.client, true, sent, received));
  EXPECT_EQ(sent, 5u);
  ASSERT_TRUE(tcp_counts(p.server, false, sent, received));
  EXPECT_EQ(received, 2u);
  char rest[8];
  ASSERT_EQ(::recv(p.server, rest, sizeof rest, MSG_WAITALL), 3);  // and the end of the stream
  ASSERT_TRUE(tcp_counts(p.server, false, sent, received));
  EXPECT_EQ(received, 5u);
}

}  // namespace
}  // namespace ferry::endpoint
