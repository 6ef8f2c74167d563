// The registry of ferry's own descriptors: what it answers, above and below the lowest
// number it ever held.
#include "core/base/own_fd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

namespace ferry {
namespace {

int spare_fd() { return ::dup(STDERR_FILENO); }

TEST(OwnFd, OwnsWhatItRegisteredAndNothingElse) {
  // A descriptor moved high, then one registered where it is, lower than the first.
  const int high = own::adopt(spare_fd(), [](int, int) {});
  ASSERT_GE(high, 0);
  EXPECT_TRUE(own::owns(high));
  const int low = spare_fd();
  ASSERT_GE(low, 0);
  ASSERT_LT(low, high);
  EXPECT_FALSE(own::owns(low));
  own::add(low, [](int, int) {});
  EXPECT_TRUE(own::owns(low));
  for (int fd : {0, 1, 2, low - 1, low + 1, high + 1}) EXPECT_FALSE(fd != high && own::owns(fd)) << fd;

  // close_range's view: the parts of a range without ferry's numbers.
  std::vector<std::pair<unsigned, unsigned>> parts;
  own::around(0, ~0u, [&](unsigned a, unsigned b) { parts.push_back({a, b}); });
  ASSERT_GE(parts.size(), 2u);
  EXPECT_EQ(parts.front().first, 0u);
  EXPECT_EQ(parts.back().second, ~0u);
  for (auto [a, b] : parts) {
    EXPECT_FALSE(a <= static_cast<unsigned>(low) && static_cast<unsigned>(low) <= b);
    EXPECT_FALSE(a <= static_cast<unsigned>(high) && static_cast<unsigned>(high) <= b);
  }
  parts.clear();
  own::around(0, static_cast<unsigned>(low) - 1, [&](unsigned a, unsigned b) { parts.push_back({a, b}); });
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0], std::make_pair(0u, static_cast<unsigned>(low) - 1));

  own::forget(low);
  own::forget(high);
  EXPECT_FALSE(own::owns(low));
  EXPECT_FALSE(own::owns(high));
  ::close(low);
  ::close(high);
}

}  // namespace
}  // namespace ferry
