#include "core/config.h"

#include <cstring>
#include <strings.h>

namespace ferry {
namespace {

constexpr std::string_view kPrefix = "FERRY_";

constinit Config g_config;

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

struct Setting {
  SettingDoc doc;
  bool (*apply)(std::string_view value, Config& c);
  const char* expected;
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {
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
      {{"FERRY_LIBRARY", "(found)", "Launcher only: the libferry.so to preload, when not next to the ferry program."},
       [](std::string_view v, Config&) { return !v.empty(); },
       "a file path"},
  };
  return all;
}

}  // namespace

const std::vector<SettingDoc>& setting_docs() {
  static const std::vector<SettingDoc> docs = [] {
    std::vector<SettingDoc> d;
    for (const auto& s : settings()) d.push_back(s.doc);
    return d;
  }();
  return docs;
}

Config parse_config(const char* const* env, std::vector<std::string>& problems) {
  Config c;
  for (; env && *env; ++env) {
    std::string_view entry(*env);
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    auto eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
    const Setting* match = nullptr;
    for (const auto& s : settings())
      if (name == s.doc.name) match = &s;
    if (!match) {
      problems.push_back("unknown setting " + std::string(name) + " ignored (see ferry --help)");
      continue;
    }
    Config trial = c;
    if (match->apply(value, trial)) {
      c = trial;
    } else {
      problems.push_back("malformed " + std::string(name) + "=\"" + std::string(value) +
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
