#include "core/base/config.h"

#include "core/base/fork_path.h"

#include <cstdio>
#include <cstring>
#include <strings.h>

namespace ferry {
namespace {

constexpr std::string_view kPrefix = "FERRY_";

// Never destroyed: threads of ferry read settings while the process exits.
union ConfigHolder {
  constexpr ConfigHolder() : c() {}
  FERRY_FORK_PATH ~ConfigHolder() {}  // runs at every exit
  Config c;
};
FERRY_FORK_DATA constinit ConfigHolder g_holder;
Config& g_config = g_holder.c;

bool parse_bool(std::string_view v, bool& out) {
  for (const char* t : {"1", "yes", "on", "true"})
    if (v.size() == std::strlen(t) && strncasecmp(v.data(), t, v.size()) == 0) return out = true, true;
  for (const char* f : {"0", "no", "off", "false"})
    if (v.size() == std::strlen(f) && strncasecmp(v.data(), f, v.size()) == 0) return out = false, true;
  return false;
}

bool parse_level(std::string_view v, LogLevel& out) {
  static constexpr const char* names[] = {"off", "error", "warn", "info", "debug", "trace"};
  for (int i = 0; i <= 5; ++i) {
    bool by_name = v.size() == std::strlen(names[i]) && strncasecmp(v.data(), names[i], v.size()) == 0;
    bool by_number = v.size() == 1 && v[0] == '0' + i;
    if (by_name || by_number) return out = static_cast<LogLevel>(i), true;
  }
  return false;
}

}  // namespace

bool parse_size(std::string_view v, uint64_t& out) {
  if (v.empty()) return false;
  uint64_t n = 0;
  size_t i = 0;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
    if (n > (uint64_t{1} << 40)) return false;
    n = n * 10 + static_cast<uint64_t>(v[i] - '0');
  }
  if (i == 0) return false;
  if (i < v.size()) {
    if (i + 1 != v.size()) return false;
    switch (v[i] | 0x20) {
      case 'k': n <<= 10; break;
      case 'm': n <<= 20; break;
      case 'g': n <<= 30; break;
      default: return false;
    }
  }
  out = n;
  return true;
}

namespace {

bool parse_u32(std::string_view v, uint32_t lo, uint32_t hi, uint32_t& out) {
  uint64_t n = 0;
  if (v.empty() || v.size() > 10) return false;
  for (char ch : v) {
    if (ch < '0' || ch > '9') return false;
    n = n * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (n < lo || n > hi) return false;
  out = static_cast<uint32_t>(n);
  return true;
}

struct Setting {
  SettingDoc doc;
  bool (*apply)(std::string_view value, Config& c);
  const char* expected;
};

const std::vector<Setting>& settings() {
  // Never destroyed, like the settings themselves.
  static const std::vector<Setting>& all = *new std::vector<Setting>{
      {{"FERRY_ENABLE", "1", "0 makes ferry a pure passthrough: every call goes straight to libc."},
       [](std::string_view v, Config& c) { return parse_bool(v, c.enable); },
       "0 or 1"},
      {{"FERRY_LOG", "warn", "Log level: off, error, warn, info, debug, trace (or 0-5)."},
       [](std::string_view v, Config& c) { return parse_level(v, c.log_level); },
       "off|error|warn|info|debug|trace or 0-5"},
      {{"FERRY_LOG_FILE", "(stderr)", "Write the log to this file instead of stderr; %p is replaced by the pid."},
       [](std::string_view v, Config& c) { return !v.empty() && (c.log_file = std::string(v), true); },
       "a file path"},
      {{"FERRY_BACKTRACE", "0", "1 prints a symbolized backtrace on SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT, then re-raises."},
       [](std::string_view v, Config& c) { return parse_bool(v, c.backtrace); },
       "0 or 1"},
      {{"FERRY_STATS", "0", "1 prints ferry's counters to the log when the process exits."},
       [](std::string_view v, Config& c) { return parse_bool(v, c.stats); },
       "0 or 1"},
      {{"FERRY_DEVICES", "(all)", "RDMA devices to use: name[:port],... (default: every ACTIVE device)."},
       [](std::string_view v, Config& c) { return !v.empty() && (c.devices = std::string(v), true); },
       "name[:port],..."},
      {{"FERRY_RING_SIZE", "256k", "Bytes in each connection's receive ring: a power of two, 4k to 1g."},
       [](std::string_view v, Config& c) {
         uint64_t n = 0;
         return parse_size(v, n) && n >= 4096 && n <= (uint64_t{1} << 30) && (n & (n - 1)) == 0 &&
                (c.ring_size = n, true);
       },
       "a power of two between 4k and 1g"},
      {{"FERRY_UPGRADE_TIMEOUT_MS", "2000", "How long an upgrade may take, and how long a server holds an early request."},
       [](std::string_view v, Config& c) { return parse_u32(v, 10, 600000, c.upgrade_timeout_ms); },
       "milliseconds, 10 to 600000"},
      {{"FERRY_ACCEPT_WAIT_MS", "30000",
        "How long a server keeps a peer's upgrade request for a connection the program has not accepted yet."},
       [](std::string_view v, Config& c) { return parse_u32(v, 10, 600000, c.accept_wait_ms); },
       "milliseconds, 10 to 600000"},
      {{"FERRY_POLL_US", "1000", "Busy-poll at most this many microseconds before a blocking call sleeps."},
       [](std::string_view v, Config& c) { return parse_u32(v, 0, 1000000, c.poll_us); },
       "microseconds, 0 to 1000000"},
      {{"FERRY_POLL_ADAPT", "1",
        "1 spins only as long as recent waits show it pays (never on one CPU); 0 always spins FERRY_POLL_US."},
       [](std::string_view v, Config& c) { return parse_bool(v, c.poll_adapt); },
       "0 or 1"},
      {{"FERRY_RULES", "/etc/ferry/ferry.conf",
        "Rules file: which connections try RDMA and which stay on TCP (config/ferry.conf.example)."},
       [](std::string_view v, Config& c) { return !v.empty() && (c.rules_file = std::string(v), true); },
       "a file path"},
      {{"FERRY_LIBRARY", "(found)", "Launcher only: the libferry.so to preload, when not next to the ferry program."},
       [](std::string_view v, Config&) { return !v.empty(); },
       "a file path"},
  };
  return all;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch != 0x7f) {
      out += static_cast<char>(ch);
      continue;
    }
    char hex[5];
    snprintf(hex, sizeof hex, "\\x%02x", ch);
    out += hex;
  }
  return out;
}

const std::vector<SettingDoc>& setting_docs() {
  static const std::vector<SettingDoc>& docs = *[] {
    auto* d = new std::vector<SettingDoc>;  // never destroyed
    for (const auto& s : settings()) d->push_back(s.doc);
    return d;
  }();
  return docs;
}

Config parse_config(const char* const* env, std::vector<std::string>& problems, bool secure) {
  Config c;
  for (; env && *env; ++env) {
    std::string_view entry(*env);
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    if (secure) {
      problems.push_back("FERRY_* settings ignored in a setuid, setgid or capability-raising program: defaults apply");
      break;
    }
    auto eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
    const Setting* match = nullptr;
    for (const auto& s : settings())
      if (name == s.doc.name) match = &s;
    if (!match) {
      problems.push_back("unknown setting " + printable(name) + " ignored (see ferry --help)");
      continue;
    }
    Config trial = c;
    if (match->apply(value, trial)) {
      c = trial;
    } else {
      problems.push_back("malformed " + printable(name) + "=\"" + printable(value) +
                         "\" ignored: expected " + match->expected + "; using " + match->doc.fallback);
    }
  }
  return c;
}

std::string expand_log_path(std::string_view pattern, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'p') {
        out += std::to_string(pid);
        ++i;
        continue;
      }
      if (pattern[i + 1] == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

const Config& config() noexcept { return g_config; }
void set_config(Config c) { g_config = std::move(c); }

}  // namespace ferry
