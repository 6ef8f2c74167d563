// A thread's wait on one connection: for its signal to move (core/base/wait.h's loop, with
// the connection's own way of looking for news and of preparing a sleep).
#pragma once

#include "core/conn/link.h"

#include <cstdint>

namespace ferry {

// Sleeps until the link's signal moves past `seen`, at most until `deadline_us` (0: no
// limit). A link still in its handshake is not spun on: its bytes come from the kernel,
// whose arrivals the poller announces, and spinning would take the CPU the peer may
// need (a connection whose upgrade never completes would spin on every call).
int wait_for(Link& link, uint32_t seen, int64_t deadline_us);

}  // namespace ferry
