#include "core/conn/socket.h"

#include <gtest/gtest.h>
#include <netinet/in.h>

namespace ferry {
namespace {

TEST(SocketState, StartsOnKernel) {
  Socket s(AF_INET, Role::fresh);
  EXPECT_EQ(s.transport(), Transport::kernel);
  EXPECT_EQ(s.family(), AF_INET);
}

TEST(SocketState, LegalEdgesOnly) {
  Socket s(AF_INET6, Role::active);
  EXPECT_FALSE(s.transition(Transport::kernel, Transport::rdma));  // must upgrade first
  EXPECT_TRUE(s.transition(Transport::kernel, Transport::upgrading));
  EXPECT_FALSE(s.transition(Transport::kernel, Transport::upgrading));  // not the current state
  EXPECT_TRUE(s.transition(Transport::upgrading, Transport::rdma));
  EXPECT_TRUE(s.transition(Transport::rdma, Transport::kernel));  // back to TCP (fork)
  EXPECT_TRUE(s.transition(Transport::kernel, Transport::closing));
  EXPECT_FALSE(s.transition(Transport::closing, Transport::kernel));
  EXPECT_EQ(s.transport(), Transport::closing);
}

TEST(SocketState, FailedUpgradeReturnsToKernel) {
  Socket s(AF_INET, Role::passive);
  ASSERT_TRUE(s.transition(Transport::kernel, Transport::upgrading));
  EXPECT_TRUE(s.transition(Transport::upgrading, Transport::kernel));
  EXPECT_EQ(s.transport(), Transport::kernel);
}

TEST(SocketState, Names) {
  EXPECT_STREQ(to_string(Role::listener), "listener");
  EXPECT_STREQ(to_string(Transport::rdma), "rdma");
}

}  // namespace
}  // namespace ferry
