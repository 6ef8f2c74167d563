#include "core/conn/link.h"
#include "core/conn/socket.h"
#include "core/proto/conn_state.h"

#include <gtest/gtest.h>
#include <netinet/in.h>

#include <memory>

namespace ferry {
namespace {

constexpr ConnState kAll[] = {ConnState::handshake, ConnState::established, ConnState::failed,
                              ConnState::downgrading, ConnState::downgraded};

TEST(ConnStateTable, OnlyTheDrawnMoves) {
  int legal = 0;
  for (ConnState from : kAll)
    for (ConnState to : kAll) legal += legal_move(from, to);
  EXPECT_EQ(legal, 5);
  EXPECT_TRUE(legal_move(ConnState::handshake, ConnState::established));
  EXPECT_TRUE(legal_move(ConnState::handshake, ConnState::failed));
  EXPECT_TRUE(legal_move(ConnState::established, ConnState::downgrading));
  EXPECT_TRUE(legal_move(ConnState::established, ConnState::downgraded));
  EXPECT_TRUE(legal_move(ConnState::downgrading, ConnState::downgraded));
  for (ConnState to : kAll) {  // the ends are ends
    EXPECT_FALSE(legal_move(ConnState::failed, to));
    EXPECT_FALSE(legal_move(ConnState::downgraded, to));
  }
}

TEST(ConnStateTable, WhatTheProgramsCallsSee) {
  EXPECT_EQ(transport_of(ConnState::handshake), Transport::upgrading);
  EXPECT_EQ(transport_of(ConnState::established), Transport::rdma);
  EXPECT_EQ(transport_of(ConnState::downgrading), Transport::rdma);  // down/ answers the calls
  EXPECT_EQ(transport_of(ConnState::downgraded), Transport::kernel);
  EXPECT_EQ(transport_of(ConnState::failed), Transport::kernel);
  EXPECT_TRUE(was_established(ConnState::downgraded));
  EXPECT_FALSE(was_established(ConnState::failed));
  EXPECT_TRUE(is_down(ConnState::downgrading));
  EXPECT_FALSE(is_down(ConnState::established));
}

// A link on a socket: the socket's transport follows the link's moves.
struct Attached {
  SocketRef s = make_socket(AF_INET, Role::active);
  std::shared_ptr<Link> link = std::make_shared<Link>();
  Attached() {
    s->link = link;
    link->socket = s;
  }
};

TEST(SocketState, StartsOnKernel) {
  Socket s(AF_INET, Role::fresh);
  EXPECT_EQ(s.transport(), Transport::kernel);
  EXPECT_EQ(s.family(), AF_INET);
}

TEST(SocketState, FollowsTheLinkUpAndBack) {
  Attached a;
  ASSERT_TRUE(a.link->attach(*a.s));
  EXPECT_EQ(a.s->transport(), Transport::upgrading);
  EXPECT_FALSE(a.link->transition(ConnState::established, ConnState::downgrading));  // not the current state
  EXPECT_TRUE(a.link->transition(ConnState::handshake, ConnState::established));
  EXPECT_EQ(a.s->transport(), Transport::rdma);
  EXPECT_TRUE(a.link->established());
  EXPECT_FALSE(a.link->down());
  EXPECT_TRUE(a.link->transition(ConnState::established, ConnState::downgrading));
  EXPECT_EQ(a.s->transport(), Transport::rdma);
  EXPECT_TRUE(a.link->down());
  EXPECT_TRUE(a.link->established());
  EXPECT_TRUE(a.link->transition(ConnState::downgrading, ConnState::downgraded));
  EXPECT_EQ(a.s->transport(), Transport::kernel);
}

TEST(SocketState, FailedUpgradeReturnsToKernel) {
  Attached a;
  ASSERT_TRUE(a.link->attach(*a.s));
  EXPECT_TRUE(a.link->transition(ConnState::handshake, ConnState::failed));
  EXPECT_FALSE(a.link->transition(ConnState::handshake, ConnState::established));  // decided
  EXPECT_EQ(a.s->transport(), Transport::kernel);
  EXPECT_EQ(a.link->state(), ConnState::failed);
}

TEST(SocketState, KernelForGoodRefusesTheLink) {
  Attached a;
  a.s->kernel_for_good.store(true);
  EXPECT_FALSE(a.link->attach(*a.s));
  EXPECT_EQ(a.s->transport(), Transport::kernel);
  EXPECT_EQ(a.link->state(), ConnState::failed);  // nothing waits for it
}

TEST(SocketState, AGoneSocketLeavesTheLinkItsMoves) {
  auto link = std::make_shared<Link>();
  {
    Attached a;
    a.link = link;
    a.s->link = link;
    link->socket = a.s;
    ASSERT_TRUE(link->attach(*a.s));
  }
  EXPECT_TRUE(link->transition(ConnState::handshake, ConnState::established));
}

#if !FERRY_CHECKS
TEST(SocketState, AMoveOffTheTableIsRefused) {
  Attached a;
  ASSERT_TRUE(a.link->attach(*a.s));
  EXPECT_FALSE(a.link->transition(ConnState::handshake, ConnState::downgraded));
  EXPECT_EQ(a.link->state(), ConnState::handshake);
}
#else
TEST(SocketStateDeathTest, AMoveOffTheTableIsFatalInCheckedBuilds) {
  Attached a;
  ASSERT_TRUE(a.link->attach(*a.s));
  EXPECT_DEATH(a.link->transition(ConnState::handshake, ConnState::downgraded), "off the table");
}
#endif

TEST(SocketState, Names) {
  EXPECT_STREQ(to_string(Role::listener), "listener");
  EXPECT_STREQ(to_string(Transport::rdma), "rdma");
  EXPECT_STREQ(to_string(ConnState::downgrading), "downgrading");
}

}  // namespace
}  // namespace ferry
