// One logging macro for all of ferry. Messages go through the real write() to stderr or
// to FERRY_LOG_FILE, whose descriptor ferry keeps out of the application's reach.
#pragma once

#include "core/base/config.h"
#include "core/base/fork_path.h"

#include <atomic>
#include <cstddef>

#ifndef FERRY_LOG_CEILING
#define FERRY_LOG_CEILING 5  // compile-time maximum level; lower it to strip debug/trace
#endif

namespace ferry::log {

extern std::atomic<int> g_level;

inline bool enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= FERRY_LOG_CEILING &&
         static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void write(LogLevel level, const char* module, const char* fmt, ...) noexcept
    __attribute__((format(printf, 3, 4)));

// Writes text as is (no prefix), whatever the level.
void write_raw(const char* text, size_t len) noexcept;

// Opens FERRY_LOG_FILE (if set) on a high, close-on-exec descriptor of ferry's own
// (core/base/own_fd.h) and sets the level.
void open(const Config& c, long pid) noexcept;
// After fork: a per-pid log file is opened for the child by its first write.
FERRY_FORK_PATH void reopen_after_fork(const Config& c) noexcept;


}  // namespace ferry::log

#define FERRY_LOG(level, module, ...)                                          \
  do {                                                                         \
    if (::ferry::log::enabled(::ferry::LogLevel::level))                       \
      ::ferry::log::write(::ferry::LogLevel::level, module, __VA_ARGS__);      \
  } while (0)
