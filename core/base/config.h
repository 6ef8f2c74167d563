// FERRY_* settings: parsed once from the environment, never on a hot path.
#pragma once

#include "core/base/fork_path.h"
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

enum class LogLevel : int { off = 0, error = 1, warn = 2, info = 3, debug = 4, trace = 5 };

struct Config {
  bool enable = true;                 // FERRY_ENABLE
  LogLevel log_level = LogLevel::warn;  // FERRY_LOG
  std::string log_file;               // FERRY_LOG_FILE ("" = stderr), %p -> pid
  bool backtrace = false;             // FERRY_BACKTRACE
  bool stats = false;                 // FERRY_STATS
  std::string devices;                // FERRY_DEVICES ("" = every ACTIVE device)
  uint64_t ring_size = 256 * 1024;    // FERRY_RING_SIZE, bytes of each receive ring
  uint32_t upgrade_timeout_ms = 2000; // FERRY_UPGRADE_TIMEOUT_MS
  uint32_t accept_wait_ms = 30000;    // FERRY_ACCEPT_WAIT_MS: an early request waits for accept
  uint32_t poll_us = 1000;            // FERRY_POLL_US: busy-poll before sleeping
  bool poll_adapt = true;             // FERRY_POLL_ADAPT: spin only while it pays
  std::string rules_file;             // FERRY_RULES ("" = /etc/ferry/ferry.conf if it exists)
};

// One documented setting, as `ferry --help` and the README list them.
struct SettingDoc {
  const char* name;
  const char* fallback;
  const char* help;
};
const std::vector<SettingDoc>& setting_docs();

// Parses "NAME=value" strings (environ). Anything malformed or unknown under the
// FERRY_ prefix leaves the default in place and adds one message to `problems`.
// `secure`: a secure-execution process (AT_SECURE: setuid, setgid, file capabilities),
// whose environment its invoker chose: every FERRY_* setting is ignored (one problem
// says so), as the dynamic loader ignores LD_* there. Problems quote names and values
// with control characters escaped (\xNN): they go to the log.
Config parse_config(const char* const* env, std::vector<std::string>& problems, bool secure = false);

// "262144", "256k", "1m": a byte count.
bool parse_size(std::string_view v, uint64_t& out);
// Control characters (and DEL) as \xNN: a setting's name or value, or a rules file's
// line, may hold a newline, and they go to the log.
std::string printable(std::string_view s);

// FERRY_LOG_FILE with %p replaced by `pid` (and %% by %).
std::string expand_log_path(std::string_view pattern, long pid);

// The process-wide settings, written once at startup before any other thread runs.
FERRY_FORK_PATH const Config& config() noexcept;
void set_config(Config c);

}  // namespace ferry
