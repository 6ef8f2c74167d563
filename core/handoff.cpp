#include "core/handoff.h"

#include "core/fdtable.h"
#include "core/libc.h"
#include "core/link.h"
#include "core/log.h"
#include "core/stream.h"

#include <fcntl.h>

#include <cstring>

#include <utility>
#include <vector>

namespace ferry::handoff {
namespace {

// A socket that may leave kernel TCP, or has: one this process can hand over.
bool ours(const SocketRef& s) { return s && s->link && !s->link->inherited && s->transport() != Transport::kernel; }

void hand(int fd, Socket& s) {
  const long r = stream::hand_off(fd, s);
  if (r < 0) FERRY_LOG(warn, "handoff", "fd %d: handed over reset (%s)", fd, strerror(static_cast<int>(-r)));
}

}  // namespace

void before_exec() noexcept {
  // Collected first: a hand-off waits, and the table must not be held meanwhile.
  std::vector<std::pair<int, SocketRef>> leaving;
  fd_table().for_each([&](int fd, const SocketRef& s) {
    if (ours(s)) leaving.emplace_back(fd, s);
  });
  for (auto& [fd, s] : leaving) {
    const int flags = real.fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) hand(fd, *s);
  }
}

void before_passing(const msghdr* msg) noexcept {
  if (!msg || !msg->msg_control || msg->msg_controllen == 0) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (int i = 0; i < n; ++i) {
      SocketRef s = fd_table().get(fds[i]);
      if (ours(s)) hand(fds[i], *s);
    }
  }
}

}  // namespace ferry::handoff
