// poll over a mix of kernel descriptors and upgraded sockets: the kernel answers for
// its descriptors, readiness::of() for the upgraded ones, and a per-thread Kicker
// wakes the sleeping ppoll when an upgraded socket changes. select and pselect are
// served by the same loop.
#pragma once

#include "core/base/fork_path.h"
#include <poll.h>
#include <signal.h>

#include <cstdint>

namespace ferry {

// True when some entry is an upgraded socket or one being upgraded (whose readiness may
// move to user space while the call sleeps), so that poll_mixed() must serve the call.
// Marks epoll instances among the entries as nested.
bool needs_user_space(const pollfd* fds, nfds_t n) noexcept;

// poll/ppoll semantics; timeout_us < 0 waits forever. Returns the count or -errno.
long poll_mixed(pollfd* fds, nfds_t n, int64_t timeout_us, const sigset_t* mask) noexcept;

// In a forked child: the forking thread's waiter gets an eventfd of its own (the
// inherited one is shared with the parent's thread).
FERRY_FORK_PATH void poll_mixed_after_fork_child() noexcept;

}  // namespace ferry
