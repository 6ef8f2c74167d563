// What the files of Channel (core/conn/channel.h) share: the tags on work requests, the
// control slot's size, and a cursor over an iovec list.
#pragma once

#include "core/proto/wire.h"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace ferry::channel_parts {

// On a receive request's wr_id.
inline constexpr uint64_t kRecvTag = uint64_t{1} << 63;
// On a send request's wr_id: its completion confirms a message (post_control_locked).
inline constexpr uint64_t kConfirmTag = uint64_t{1} << 62;
// On a send request's wr_id: its completion confirms the hand-off message.
inline constexpr uint64_t kHandoffTag = uint64_t{1} << 61;
inline constexpr uint32_t kSlot = wire::kControlSize;
// A spinning waiter polls the CQ one look in this many (poll_spinning_locked).
inline constexpr uint32_t kCqEvery = 8;

// A position in an iovec list, moved forward piece by piece.
struct IovCursor {
  const iovec* iov;
  int iovcnt;
  int v = 0;
  size_t voff = 0;
  // Hands the next n bytes of the list (fewer if it ends) to f(app, done, length), one
  // contiguous piece at a time; `done` counts the bytes handed before the piece.
  template <class F>
  void take(size_t n, F f) {
    if (iovcnt == 1 && v == 0 && voff == 0 && n > 0 && n <= iov->iov_len) {  // the usual case: one buffer, one piece
      f(static_cast<uint8_t*>(iov->iov_base), 0, n);
      voff = n;
      if (n == iov->iov_len) v = 1;
      return;
    }
    for (size_t done = 0; done < n && v < iovcnt;) {
      const size_t k = iov[v].iov_len - voff < n - done ? iov[v].iov_len - voff : n - done;
      if (k > 0) f(static_cast<uint8_t*>(iov[v].iov_base) + voff, done, k);
      done += k;
      voff += k;
      if (voff == iov[v].iov_len) {
        ++v;
        voff = 0;
      }
    }
  }
};

inline size_t iov_total(const iovec* iov, int iovcnt) {
  size_t t = 0;
  for (int i = 0; i < iovcnt; ++i) t += iov[i].iov_len;
  return t;
}

}  // namespace ferry::channel_parts
