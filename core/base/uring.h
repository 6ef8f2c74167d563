// io_uring instances. A ring reads and writes its sockets in the kernel, out of any
// interposed call's sight: liburing makes its system calls itself, and a request a
// ring carries for a connection on RDMA would find the kernel socket silent (or read
// ferry's own bytes from it). So the moment a process creates a ring (liburing's
// io_uring_queue_init*, io_uring_setup, or the system call through libc's syscall();
// preload/uring.cpp), every connection of the process it could reach goes back to
// kernel TCP first (core/conn/handoff.h), and from then on the process's new
// connections stay there (`tcp_io_uring`). Which sockets a ring will touch cannot be
// known beforehand, so this is done for all of them. Inherited by a forked child; an
// exec starts afresh (a ring's descriptor is always close-on-exec).
//
// Not seen: a program that makes the system call itself (inline assembly) without
// liburing's exported functions or libc's syscall(). docs/compatibility.md says so.
#pragma once

#include <atomic>

namespace ferry::uring {

namespace detail {
extern std::atomic<bool> g_seen;
}

// Whether this process has created (or is about to create) an io_uring instance.
inline bool seen() noexcept { return detail::g_seen.load(std::memory_order_acquire); }
// Notes that it is about to; true the first time.
bool saw() noexcept;

}  // namespace ferry::uring
