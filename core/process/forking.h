// fork, however it happens: ferry's handlers are registered with pthread_atfork, so
// glibc's own forks (daemon(), and any library's fork) run them as fork() does.
//
// Before the fork, the forking thread takes every lock that is only ever held for a
// short section and guards state the child keeps using: the poller's gate (the poller
// thread is between two rounds, so no librdmacm or libibverbs lock is taken mid-call),
// the descriptor registry's locks, each epoll set's lock, each channel's lock and each
// signal's waiter-list lock. The parent releases them; the child gets them fresh.
// Locks another thread may hold at the fork (a socket's send and receive locks) cannot
// be taken that way: they are core/base/lock.h's, which a child finds free when its holder
// was a thread of the parent. What they guard is either the kernel socket's
// bookkeeping or an upgraded connection the child may not use (its calls fail with
// ECONNRESET / EPIPE without looking at the RDMA state).
//
// The child's handler allocates nothing: what it needs fresh is made in the parent
// before the fork (Spare). A child's first allocation of some size makes malloc tidy
// its free lists, which writes into pages all over a large parent's heap, each write a
// copy-on-write fault: for a forking server, most of the cost ferry added to a fork.
#pragma once

#include "core/base/fork_path.h"
#include "core/base/generation.h"


namespace ferry::forking {

// Registers the handlers (once).
void install() noexcept;

}  // namespace ferry::forking
