// The passthrough path: a call on a descriptor that is no socket ferry tracks, or on a
// socket that stays on kernel TCP for good (the only kind a program that never reaches
// RDMA has), is libc's own call, its result and errno exactly libc's, and counted when
// the descriptor is a tracked socket. The exports of the per-request calls take it
// inline before anything else; every other descriptor goes through the api function.
// What it costs beyond libc: one byte of the fd table, a branch, a counter.
#pragma once

#include "core/api/api.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"

#include <stdint.h>

namespace ferry::api {

// kernel: libc's call, uncounted (not a tracked socket); counted: libc's call on a
// socket on kernel TCP for good; look: the socket's bytes may travel over RDMA.
enum class Path : uint8_t { kernel, counted, look };

inline Path path_of(int fd) noexcept {
  const uint8_t st = fd_table().state(fd);
  if (!(st & FdTable::kBound)) return Path::kernel;
  return (st & FdTable::kMarked) ? Path::counted : Path::look;
}

// After libc's receive on a descriptor of path p: its result, unchanged.
inline long received(Path p, long r) noexcept {
  if (r > 0 && p == Path::counted) stats::add(stats::g.bytes_tcp_received, static_cast<uint64_t>(r));
  return r;
}

// After libc's send on fd, of path p: its result, unchanged.
inline long sent(int fd, Path p, long r) noexcept {
  if (r > 0 && p == Path::counted) {
    stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
    settle_connect(fd);
  }
  return r;
}

// epoll_ctl on a socket on kernel TCP for good: libc's call; an added descriptor is one
// more the set of epfd does not answer for (told once, see epoll_sets()).
FERRY_IO_PATH void kernel_member_added(int epfd) noexcept;
inline int kernel_epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept {
  const int r = real.epoll_ctl(epfd, op, fd, ev);
  if (r == 0 && op == EPOLL_CTL_ADD) kernel_member_added(epfd);
  return r;
}

}  // namespace ferry::api
