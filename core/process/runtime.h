// Process-wide start-up, fork and exit handling.
#pragma once

#include "core/base/fork_path.h"
namespace ferry::runtime {

// Resolves libc, reads FERRY_*, opens the log, adopts inherited sockets. Idempotent.
void start() noexcept;
// Prints the counters if FERRY_STATS asked for them.
FERRY_FORK_PATH void finish() noexcept;
// Before an exec: as finish(), but says nothing when nothing was counted (a forked
// child that only runs another program, whose own ferry counts afresh and prints its
// counters with the same pid).
void finish_before_exec() noexcept;

}  // namespace ferry::runtime
