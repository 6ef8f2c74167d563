// Process-wide start-up, fork and exit handling.
#pragma once

#include "core/fork_path.h"
namespace ferry::runtime {

// Resolves libc, reads FERRY_*, opens the log, adopts inherited sockets. Idempotent.
void start() noexcept;
// Prints the counters if FERRY_STATS asked for them.
FERRY_FORK_PATH void finish() noexcept;
// In a child just forked (from the pthread_atfork child handler, core/forking.h).
FERRY_FORK_PATH void after_fork_child() noexcept;

}  // namespace ferry::runtime
