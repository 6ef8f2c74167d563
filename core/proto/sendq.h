// Bytes an upgraded connection accepted from the program that the peer's ring has no
// room for yet: the send buffer kernel TCP would hold. Plain memory (nothing
// registered), in chunks taken on demand and given back as they drain, so an idle
// connection holds none. A FIFO of bytes, no verbs: the channel drains it into the
// ring as the peer's credits come back.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>

namespace ferry {

class SendQueue {
 public:
  static constexpr size_t kChunk = 64 * 1024;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Appends n bytes, handed over by fill(dst, k) a contiguous piece at a time (in order).
  template <class Fill>
  void push(size_t n, Fill fill) {
    while (n > 0) {
      if (chunks_.empty() || tail_ == kChunk) {
        chunks_.emplace_back(new uint8_t[kChunk]);
        tail_ = 0;
      }
      const size_t k = n < kChunk - tail_ ? n : kChunk - tail_;
      fill(chunks_.back().get() + tail_, k);
      tail_ += k;
      size_ += k;
      n -= k;
    }
  }

  // The oldest bytes, up to `max` of them in at most `most` pieces; how many pieces.
  int gather(iovec* out, int most, size_t max) const {
    int n = 0;
    size_t left = size_ < max ? size_ : max;
    for (size_t i = 0; i < chunks_.size() && n < most && left > 0; ++i) {
      const size_t begin = i == 0 ? head_ : 0;
      const size_t end = i + 1 == chunks_.size() ? tail_ : kChunk;
      const size_t k = end - begin < left ? end - begin : left;
      out[n++] = {chunks_[i].get() + begin, k};
      left -= k;
    }
    return n;
  }

  // Drops the oldest n bytes (n <= size()).
  void pop(size_t n) {
    size_ -= n;
    while (n > 0) {
      const size_t end = chunks_.size() == 1 ? tail_ : kChunk;
      const size_t k = n < end - head_ ? n : end - head_;
      head_ += k;
      n -= k;
      if (head_ == end) {
        chunks_.pop_front();
        head_ = 0;
        if (chunks_.empty()) tail_ = 0;
      }
    }
  }

 private:
  std::deque<std::unique_ptr<uint8_t[]>> chunks_;
  size_t head_ = 0;  // first unsent byte of chunks_.front()
  size_t tail_ = 0;  // bytes filled in chunks_.back()
  size_t size_ = 0;
};

// How many bytes a connection may hold beyond what the peer's ring takes, so that it
// holds at least what kernel TCP would: the sender's send buffer (the program's
// SO_SNDBUF as the kernel reports it, doubled, or else what tcp_wmem lets it grow to)
// plus the receiver's receive buffer (what tcp_rmem lets it grow to), less the ring.
inline uint64_t send_queue_limit(uint64_t sndbuf_set, uint64_t wmem_max, uint64_t rmem_max, uint64_t peer_ring) {
  const uint64_t snd = sndbuf_set > 0 ? sndbuf_set : wmem_max;
  const uint64_t total = snd + rmem_max;
  return total > peer_ring + snd ? total - peer_ring : snd;
}

}  // namespace ferry
