// What keeps a whole process's connections on kernel TCP from some moment on, while
// ferry goes on working for it otherwise (its counters, log and poller):
//
// - io_uring. A ring reads and writes its sockets in the kernel, out of any interposed
//   call's sight: liburing makes its system calls itself, and a request a ring carries
//   for a connection on RDMA would find the kernel socket silent (or read ferry's own
//   bytes from it). So the moment a process creates a ring (liburing's
//   io_uring_queue_init*, io_uring_setup, or the system call through libc's syscall();
//   preload/uring.cpp), every connection of the process goes back to kernel TCP first
//   (core/conn/handoff.h), and its new connections stay there (`tcp_io_uring`). Which
//   sockets a ring will touch cannot be known beforehand, so this holds for all of
//   them. Inherited by a forked child (it shares the ring); an exec starts afresh (a
//   ring's descriptor is always close-on-exec). Not seen: a program that makes the
//   system call in its own assembly.
// - A change of credentials (setuid, setgid, setgroups and the rest of the family, or
//   capset; preload/credentials.cpp) once this process opened rdma_cm and its devices.
//   The kernel refuses commands written to those descriptors by a process whose
//   credentials are no longer the ones they were opened with (rdma_cm's connect,
//   accept and disconnect, and a soft device's every post): an rsync daemon's child
//   that switches to a module's user after its connection upgraded failed it there.
//   So the connections go back to TCP before the change and the process's new ones
//   stay there (`tcp_credentials`). A forked child opens its own, with the
//   credentials it has then, so it starts afresh; so does a process whose credentials
//   changed before ferry opened anything (an nginx worker).
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::tcp_only {

enum Why : uint8_t { io_uring = 1, credentials = 2 };

namespace detail {
extern std::atomic<uint8_t> g_why;
}

// What keeps this process's new connections on TCP: a set of Why, 0 for nothing.
inline uint8_t why() noexcept { return detail::g_why.load(std::memory_order_acquire); }
// Notes that `w` is about to hold; true the first time it does.
bool enter(Why w) noexcept;
// A forked child: credentials no longer hold (its RDMA objects are its own).
void after_fork_child() noexcept;

}  // namespace ferry::tcp_only
