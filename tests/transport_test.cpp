// The RDMA data path without sockets: two Channels connected through rdma_cm on the
// test bed's address, streaming in both directions at once with every byte checked.
// Skips unless TESTBED_IP names an address with an RDMA device behind it.
#include "core/conn/channel.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <poll.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

namespace ferry {
namespace {

uint8_t byte_at(uint64_t i, uint64_t seed) { return static_cast<uint8_t>((i + seed) * 2654435761u >> 11); }

rdma_cm_event* next_event(rdma_event_channel* ch, rdma_cm_event_type want) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, 10000) != 1) return nullptr;
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) return nullptr;
  if (ev->event != want) {
    ADD_FAILURE() << "got " << rdma_event_str(ev->event) << " wanting " << rdma_event_str(want);
    rdma_ack_cm_event(ev);
    return nullptr;
  }
  return ev;
}

struct Pair {
  rdma::EventChannel events{rdma_create_event_channel()};
  rdma::CmId listener;
  std::unique_ptr<Channel> client, server;
};

// Connects two channels: client -> server on ip:port, exchanging rings like ferry does.
void connect_pair(Pair& p, const char* ip, uint16_t port, uint64_t ring) {
  ASSERT_TRUE(p.events);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ASSERT_EQ(inet_pton(AF_INET, ip, &addr.sin_addr), 1);
  rdma_cm_id* raw = nullptr;
  ASSERT_EQ(rdma_create_id(p.events.get(), &raw, nullptr, RDMA_PS_TCP), 0);
  p.listener.reset(raw);
  ASSERT_EQ(rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&addr)), 0);
  ASSERT_EQ(rdma_listen(raw, 8), 0);

  ASSERT_EQ(rdma_create_id(p.events.get(), &raw, nullptr, RDMA_PS_TCP), 0);
  rdma::CmId cid(raw);
  ASSERT_EQ(rdma_resolve_addr(raw, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
  rdma_cm_event* ev = next_event(p.events.get(), RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
  ASSERT_EQ(rdma_resolve_route(raw, 2000), 0);
  ev = next_event(p.events.get(), RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
  std::string why;
  p.client = Channel::create(std::move(cid), ring, why);
  ASSERT_TRUE(p.client) << why;

  uint8_t hello[wire::kHelloSize];
  wire::encode(wire::Hello{1234, port, p.client->local_ring()}, hello);
  rdma_conn_param param{};
  param.qp_num = p.client->qp_num();
  param.private_data = hello;
  param.private_data_len = sizeof hello;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(p.client->id(), &param), 0);

  ev = next_event(p.events.get(), RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(ev, nullptr);
  wire::Hello h;
  ASSERT_EQ(wire::decode(ev->param.conn.private_data, ev->param.conn.private_data_len, h), wire::Error::ok);
  rdma::CmId sid(ev->id);
  rdma_ack_cm_event(ev);
  p.server = Channel::create(std::move(sid), ring, why);
  ASSERT_TRUE(p.server) << why;
  ASSERT_TRUE(p.server->set_peer(h.ring, why)) << why;
  ASSERT_TRUE(p.server->activate(why)) << why;
  uint8_t welcome[wire::kWelcomeSize];
  wire::encode(wire::Welcome{p.server->local_ring()}, welcome);
  param.qp_num = p.server->qp_num();
  param.private_data = welcome;
  param.private_data_len = sizeof welcome;
  ASSERT_EQ(rdma_accept(p.server->id(), &param), 0);

  // The client's QP is its own: it hears the reply, moves the QP to RTS, establishes;
  // then the server sees ESTABLISHED.
  ev = next_event(p.events.get(), RDMA_CM_EVENT_CONNECT_RESPONSE);
  ASSERT_NE(ev, nullptr);
  wire::Welcome w;
  ASSERT_EQ(wire::decode(ev->param.conn.private_data, ev->param.conn.private_data_len, w), wire::Error::ok);
  rdma_ack_cm_event(ev);
  ASSERT_TRUE(p.client->set_peer(w.ring, why)) << why;
  ASSERT_TRUE(p.client->activate(why)) << why;
  ASSERT_EQ(rdma_establish(p.client->id()), 0);
  ev = next_event(p.events.get(), RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
}

const char* testbed_ip() {
  const char* ip = getenv("TESTBED_IP");
  return ip && *ip ? ip : nullptr;
}

// Sends `total` bytes of pattern `seed` in random pieces while receiving and checking
// the peer's `total` bytes of pattern `peer_seed`.
void stream(Channel& c, uint64_t total, uint64_t seed, uint64_t peer_seed, std::atomic<bool>& ok) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(200000), in(150000);
  uint64_t sent = 0, got = 0;
  while ((sent < total || got < total) && ok) {
    std::lock_guard<Lock> lock(c.mu());
    c.poll_all_locked();
    if (c.failed()) {
      ADD_FAILURE() << c.error();
      ok = false;
      return;
    }
    if (sent < total) {
      size_t n = std::min<uint64_t>(1 + rng() % out.size(), total - sent);
      for (size_t i = 0; i < n; ++i) out[i] = byte_at(sent + i, seed);
      iovec v{out.data(), n};
      sent += c.send_locked(&v, 1, n);
    }
    iovec r{in.data(), 1 + rng() % in.size()};
    size_t m = c.recv_locked(&r, 1, false);
    for (size_t i = 0; i < m; ++i) {
      if (in[i] != byte_at(got + i, peer_seed)) {
        ADD_FAILURE() << "byte " << got + i << " differs";
        ok = false;
        return;
      }
    }
    got += m;
  }
}

TEST(Transport, BothDirectionsAtOnceEveryByteChecked) {
  const char* ip = testbed_ip();
  if (!ip) GTEST_SKIP() << "no RDMA test bed (TESTBED_IP unset)";
  Pair p;
  connect_pair(p, ip, 7471, 64 * 1024);
  ASSERT_TRUE(p.client && p.server);
  const uint64_t total = 32ull << 20;  // 512 ring lengths each way
  std::atomic<bool> ok{true};
  std::thread a([&] { stream(*p.client, total, 1, 2, ok); });
  std::thread b([&] { stream(*p.server, total, 2, 1, ok); });
  a.join();
  b.join();
  EXPECT_TRUE(ok);
}

TEST(Transport, ControlMessagesArriveInOrderWithData) {
  const char* ip = testbed_ip();
  if (!ip) GTEST_SKIP() << "no RDMA test bed (TESTBED_IP unset)";
  Pair p;
  connect_pair(p, ip, 7472, 4096);
  ASSERT_TRUE(p.client && p.server);
  char msg[3000];
  memset(msg, 'x', sizeof msg);
  size_t sent = 0;
  {
    std::lock_guard<Lock> lock(p.client->mu());
    ASSERT_TRUE(p.client->post_control_locked(wire::Op::cutover, 42));
    iovec v{msg, sizeof msg};
    ASSERT_EQ(p.client->send_locked(&v, 1, sizeof msg), sizeof msg);
    sent = sizeof msg;
    while (size_t k = p.client->send_locked(&v, 1, sizeof msg)) sent += k;  // until the ring is full
    EXPECT_GT(sent, 3800u);  // a footer and the rest of a 64-byte unit per record
    ASSERT_TRUE(p.client->post_control_locked(wire::Op::fin, p.client->written_locked()));
  }
  for (int i = 0; i < 100000; ++i) {
    std::lock_guard<Lock> lock(p.server->mu());
    p.server->poll_all_locked();
    if (p.server->peer_fin()) break;
  }
  std::lock_guard<Lock> lock(p.server->mu());
  EXPECT_TRUE(p.server->peer_cutover_known());
  EXPECT_EQ(p.server->peer_cutover(), 42u);
  EXPECT_TRUE(p.server->peer_fin());
  EXPECT_EQ(p.server->readable_locked(), sent);
  EXPECT_FALSE(p.server->failed()) << p.server->error();
}

}  // namespace
}  // namespace ferry
