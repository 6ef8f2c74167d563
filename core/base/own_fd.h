// ferry's own descriptors: the log, the poller's epoll instance and eventfd, the
// Kickers' eventfds, the rdma_cm event channel, device contexts' command and event
// descriptors, completion channels. Each is moved to a high number when ferry opens
// it (or, for those a library opened, as soon as ferry sees it), and the descriptor
// wrappers treat those numbers as nonexistent: close, close_range, closefrom, dup,
// fcntl on one of them fail with EBADF or pass over it, and a program that dup2()s or
// dup3()s onto one first has ferry's descriptor moved out of its way.
//
// Moving a descriptor means dup'ing it to a new number, publishing the new number to
// its users (a struct field of a library, an atomic of ferry's) and making sure no
// call still uses the old number; only then is the old number closed and handed to
// the program. Each registered descriptor says how (its Mover).
#pragma once

#include "core/base/fork_path.h"

#include <atomic>
#include <functional>

namespace ferry::own {

// Publishes `to` as the descriptor's number and returns once nothing uses `from` any
// more. Runs with no ferry lock held but the registry's move lock.
using Mover = std::function<void(int from, int to)>;

struct Entry {
  Mover move;
};

// The lowest number ferry moves its descriptors to: 1000 below a limit of 1064 or more,
// else just under the limit (programs rarely ask for such numbers by name).
int high_floor() noexcept;
// A duplicate of fd at a high number, close-on-exec; -errno when none can be made.
int dup_high(int fd) noexcept;
// A descriptor ferry just opened, moved to a high number (the original closed) and
// registered. Returns the number to use (fd itself when it cannot be moved).
int adopt(int fd, Mover move) noexcept;
// Registers a descriptor where it is (one a library opened and publishes elsewhere).
void add(int fd, Mover move) noexcept;
// ferry lets go of its descriptor *fd (about to close it): forgets it. Reads *fd under
// the registry's lock, so a concurrent move has either finished or not started.
int release(const std::atomic<int>& fd) noexcept;
void forget(int fd) noexcept;

// Whether fd is one of ferry's. Lock-free; below the lowest number ferry ever had
// (every number, in a process where ferry has none), one read of the fork page.
FERRY_FORK_PATH bool owns(int fd) noexcept;
// Makes fd free of ferry (moves ferry's descriptor away, closing the number). True when
// fd is not ferry's afterwards.
bool make_way(int fd) noexcept;
// Calls f(lo, hi) for the parts of [first, last] that hold no descriptor of ferry's.
void around(unsigned first, unsigned last, const std::function<void(unsigned, unsigned)>& f);

// Around fork: no move is under way while the process forks (taken before the
// poller's gate, as a move does), and the registry's locks are fresh in the child.
void prepare_fork() noexcept;
void parent_after_fork() noexcept;
FERRY_FORK_PATH void child_after_fork() noexcept;

}  // namespace ferry::own
