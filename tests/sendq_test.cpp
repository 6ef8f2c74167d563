#include "core/proto/sendq.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ferry {
namespace {

TEST(SendQueue, StartsEmptyAndHoldsNothingOnceDrained) {
  SendQueue q;
  EXPECT_TRUE(q.empty());
  iovec v[4];
  EXPECT_EQ(q.gather(v, 4, 100), 0);
  q.push(10, [](uint8_t* d, size_t k) { memset(d, 7, k); });
  EXPECT_EQ(q.size(), 10u);
  ASSERT_EQ(q.gather(v, 4, 100), 1);
  EXPECT_EQ(v[0].iov_len, 10u);
  q.pop(10);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.gather(v, 4, 100), 0);
}

TEST(SendQueue, GatherRespectsPiecesAndBytes) {
  SendQueue q;
  const size_t n = 3 * SendQueue::kChunk + 5;
  q.push(n, [](uint8_t* d, size_t k) { memset(d, 1, k); });
  iovec v[8];
  EXPECT_EQ(q.gather(v, 2, n), 2);
  EXPECT_EQ(v[0].iov_len + v[1].iov_len, 2 * SendQueue::kChunk);
  EXPECT_EQ(q.gather(v, 8, 100), 1);
  EXPECT_EQ(v[0].iov_len, 100u);
  q.pop(SendQueue::kChunk - 1);
  ASSERT_EQ(q.gather(v, 8, 10), 2);
  EXPECT_EQ(v[0].iov_len, 1u);
  EXPECT_EQ(v[1].iov_len, 9u);
}

// A random stream pushed and popped in random pieces comes out as it went in.
TEST(SendQueue, RandomStreamComesOutInOrder) {
  std::mt19937_64 rng(42);
  SendQueue q;
  uint64_t in = 0, out = 0;
  for (int round = 0; round < 20000; ++round) {
    if (rng() % 2) {
      size_t k = rng() % (3 * SendQueue::kChunk / 2);
      q.push(k, [&](uint8_t* d, size_t m) {
        for (size_t i = 0; i < m; ++i) d[i] = static_cast<uint8_t>((in + i) * 131);
        in += m;
      });
    } else {
      iovec v[5];
      int n = q.gather(v, 1 + static_cast<int>(rng() % 5), rng() % (2 * SendQueue::kChunk));
      size_t taken = 0;
      for (int i = 0; i < n; ++i) {
        for (size_t j = 0; j < v[i].iov_len; ++j)
          ASSERT_EQ(static_cast<uint8_t*>(v[i].iov_base)[j], static_cast<uint8_t>((out + taken + j) * 131));
        taken += v[i].iov_len;
      }
      size_t drop = taken ? rng() % (taken + 1) : 0;
      q.pop(drop);
      out += drop;
    }
    ASSERT_EQ(q.size(), in - out);
  }
}

TEST(SendQueue, LimitHoldsAtLeastTheKernelsBuffers) {
  // Autotuned: the send buffer's and the receive buffer's maxima, less the ring.
  EXPECT_EQ(send_queue_limit(0, 4 << 20, 6 << 20, 256 << 10), (10u << 20) - (256u << 10));
  // SO_SNDBUF set (the kernel reports it doubled).
  EXPECT_EQ(send_queue_limit(8192, 4 << 20, 6 << 20, 256 << 10), 8192u + (6u << 20) - (256u << 10));
  // A ring larger than the receive buffer: still the whole send buffer.
  EXPECT_EQ(send_queue_limit(0, 4 << 20, 1 << 20, 16 << 20), 4u << 20);
}

}  // namespace
}  // namespace ferry
