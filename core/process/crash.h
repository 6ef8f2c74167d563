// FERRY_BACKTRACE: a symbolized backtrace on fatal signals, then the signal's own
// default action, so the exit status is what it would have been.
#pragma once

namespace ferry::crash {

void install() noexcept;
// Writes the calling thread's backtrace to the log (async-signal-safe enough for a
// dying process: no allocation).
void print_backtrace() noexcept;

}  // namespace ferry::crash
