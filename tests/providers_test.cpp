#include "core/rdma/providers.h"

#include <linux/netlink.h>
#include <rdma/ib_user_ioctl_verbs.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ferry::providers {
namespace {

TEST(Providers, KnownDriversHaveTheirProviderUnknownOnesNone) {
  EXPECT_STREQ(provider_for(RDMA_DRIVER_RXE), "rxe");
  EXPECT_STREQ(provider_for(RDMA_DRIVER_MLX5), "mlx5");
  EXPECT_STREQ(provider_for(RDMA_DRIVER_SIW), "siw");
  EXPECT_STREQ(provider_for(RDMA_DRIVER_HFI1), "hfi1verbs");
  EXPECT_STREQ(provider_for(RDMA_DRIVER_QIB), "ipathverbs");
  EXPECT_EQ(provider_for(RDMA_DRIVER_UNKNOWN), nullptr);
  EXPECT_EQ(provider_for(RDMA_DRIVER_USNIC), nullptr);
  EXPECT_EQ(provider_for(1000), nullptr);
}

// Attributes as the kernel lays them out: header, payload, padding to 4 bytes.
std::vector<uint8_t> attrs(std::initializer_list<std::pair<uint16_t, std::vector<uint8_t>>> list) {
  std::vector<uint8_t> out;
  for (const auto& [type, payload] : list) {
    nlattr a{static_cast<uint16_t>(NLA_HDRLEN + payload.size()), type};
    const size_t at = out.size();
    out.resize(at + NLA_ALIGN(a.nla_len));
    memcpy(out.data() + at, &a, sizeof a);
    memcpy(out.data() + at + NLA_HDRLEN, payload.data(), payload.size());
  }
  return out;
}

TEST(Providers, FindsAnAttributeAfterPaddedOnes) {
  const auto m = attrs({{1, {'a', 'b', 'c', 0, 'd'}}, {7 | NLA_F_NESTED, {9}}, {3, {1, 0, 0, 0}}});
  size_t n = 0;
  const uint8_t* v = find_attr(m.data(), m.size(), 3, &n);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(v[0], 1);
  v = find_attr(m.data(), m.size(), 7, &n);  // flags are not part of the type
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(find_attr(m.data(), m.size(), 4, &n), nullptr);
}

TEST(Providers, MalformedAttributesEndTheWalk) {
  auto m = attrs({{1, {1, 2, 3, 4}}, {3, {5, 6, 7, 8}}});
  size_t n = 0;
  EXPECT_EQ(find_attr(m.data(), m.size() - 1, 3, &n), nullptr);  // cut short
  nlattr bad{2, 1};                                                  // shorter than its header
  memcpy(m.data(), &bad, sizeof bad);
  EXPECT_EQ(find_attr(m.data(), m.size(), 3, &n), nullptr);
  nlattr huge{0xfff0, 1};  // longer than the message
  memcpy(m.data(), &huge, sizeof huge);
  EXPECT_EQ(find_attr(m.data(), m.size(), 1, &n), nullptr);
  EXPECT_EQ(find_attr(m.data(), 3, 1, &n), nullptr);  // not even a header
}

}  // namespace
}  // namespace ferry::providers
