// Signals put off while a thread holds one of ferry's locks.
//
// Under kernel TCP a signal never lands inside a socket call's bookkeeping: the kernel
// delivers it before or after the work, or interrupts a wait. Under ferry a program's
// handler could run in the middle of a send, with the connection's lock held; a
// handler that never returns (siglongjmp out of it, as iperf3 does on SIGINT, or a
// thread that then exits) would leave the lock held for good, and the next call on
// that connection, the poller and the exit flush would wait for it for ever.
//
// So ferry's handler stands in the kernel for the program's (core/base/signals.cpp, the
// relay): a signal that finds this thread holding a ferry lock is blocked in the
// interrupted context and queued again to this thread, with its own siginfo (put_off);
// when the thread lets go of its last lock, what was put off is unblocked and the
// kernel delivers it there, with the program's mask and flags, as if it had just come.
// Only asynchronous signals are put off (not a fault of ferry's own code, nor abort).
//
// Cost on the data path: a thread-local increment per lock and a decrement and test
// per unlock, inline; the system calls only when a signal was put off.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::deferral {

// How many of ferry's locks this thread holds.
extern thread_local constinit uint32_t t_locks;
// The signals (bit sig - 1) put off until t_locks is 0 again: blocked in this thread
// and pending on it.
extern thread_local constinit uint64_t t_put_off;

// Before a lock is taken: from here a signal waits.
inline void enter() noexcept {
  ++t_locks;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// What was put off, delivered now (unblocked). Only when t_locks is 0.
void deliver() noexcept;

// After a lock is let go (or not taken).
inline void leave() noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (--t_locks == 0 && t_put_off != 0) deliver();
}

// A stretch with no lock in it that a handler must not leave halfway either (a count
// of users taken and given back around a system call, which another thread waits to
// see fall to 0): signals that come inside it wait for its end, as under a lock.
struct Stretch {
  Stretch() noexcept { enter(); }
  ~Stretch() { leave(); }
  Stretch(const Stretch&) = delete;
  Stretch& operator=(const Stretch&) = delete;
};

// Forks (core/process/forking.cpp). The forking thread's prepare handler takes locks
// (the channels', the epoll sets') that a child counts as free, held by its parent's
// threads: the child's count goes back to what it was before them, or every signal its
// program handles would be put off for good. What was put off in the parent is pending
// there, not in the child (a fork does not pass pending signals on): the child no
// longer blocks it.
extern thread_local constinit uint32_t t_locks_before_fork;
inline void before_fork() noexcept { t_locks_before_fork = t_locks; }
void after_fork_child() noexcept;

// In a signal handler: whether this thread holds a lock of ferry's.
inline bool holding() noexcept { return t_locks != 0; }

// In a signal handler that found holding(): sig blocked in the interrupted context
// `ctx` (a ucontext_t) and queued again to this thread with `info`.
void put_off(int sig, const void* info, void* ctx) noexcept;
// In a signal handler: sig queued again to this thread with `info`, for the
// disposition the kernel holds now.
void queue_again(int sig, const void* info) noexcept;

}  // namespace ferry::deferral
