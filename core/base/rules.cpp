#include "core/base/rules.h"

#include "core/base/config.h"
#include "core/base/libc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry::rules {
namespace {

constexpr size_t kLongestLine = 4096;
constexpr size_t kLargestFile = 1 << 20;
constexpr size_t kMostRules = 10000;

// Loaded by the library's constructor, which may run before this file's static
// objects are made, and read until the process's last call: made at first use, never
// destroyed.
struct Loaded {
  std::vector<Rule> rules;
  std::string path, name;
};
Loaded& loaded() {
  static Loaded* l = new Loaded;
  return *l;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_number(std::string_view v, uint32_t most, uint32_t& out) {
  if (v.empty() || v.size() > 10) return false;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > most) return false;
  out = static_cast<uint32_t>(n);
  return true;
}

// "80", "8000-8099".
bool parse_ports(std::string_view v, Ports& out) {
  const size_t dash = v.find('-');
  uint32_t lo = 0, hi = 0;
  if (dash == std::string_view::npos) {
    if (!parse_number(v, 65535, lo)) return false;
    hi = lo;
  } else if (!parse_number(v.substr(0, dash), 65535, lo) || !parse_number(v.substr(dash + 1), 65535, hi) || lo > hi) {
    return false;
  }
  out = {static_cast<uint16_t>(lo), static_cast<uint16_t>(hi)};
  return true;
}

// "10.0.0.0/8", "192.0.2.7", "fd00::/8", "::1".
bool parse_prefix(std::string_view v, Prefix& out) {
  const size_t slash = v.find('/');
  const std::string addr(v.substr(0, slash));
  Prefix p;
  if (inet_pton(AF_INET, addr.c_str(), p.addr) == 1) {
    p.bits = 32;
  } else if (inet_pton(AF_INET6, addr.c_str(), p.addr) == 1) {
    p.v6 = true;
    p.bits = 128;
  } else {
    return false;
  }
  if (slash != std::string_view::npos) {
    uint32_t bits = 0;
    if (!parse_number(v.substr(slash + 1), static_cast<uint32_t>(p.bits), bits)) return false;
    p.bits = static_cast<int>(bits);
  }
  out = p;
  return true;
}

// One condition or setting, key=value, into r. An error message, or "" when it took.
std::string take(std::string_view token, Rule& r, unsigned& seen) {
  const size_t eq = token.find('=');
  if (eq == std::string_view::npos || eq == 0) return "expected key=value";
  const std::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
  static constexpr const char* keys[] = {"program", "role", "local", "remote", "local-port", "remote-port", "ring"};
  unsigned which = 0;
  while (which < std::size(keys) && key != keys[which]) ++which;
  if (which == std::size(keys)) return "unknown key";
  if (seen & (1u << which)) return "key given twice";
  seen |= 1u << which;
  switch (which) {
    case 0:
      if (value.empty()) return "empty program";
      r.program = std::string(value);
      return "";
    case 1:
      if (value == "client") return r.role = Role::client, "";
      if (value == "server") return r.role = Role::server, "";
      return "role is client or server";
    case 2: return parse_prefix(value, r.local) ? "" : "not an address or prefix";
    case 3: return parse_prefix(value, r.remote) ? "" : "not an address or prefix";
    case 4: return parse_ports(value, r.local_ports) ? "" : "not a port or range";
    case 5: return parse_ports(value, r.remote_ports) ? "" : "not a port or range";
    default: {
      uint64_t n = 0;
      if (!parse_size(value, n) || n < 4096 || n > (uint64_t{1} << 30) || (n & (n - 1)) != 0)
        return "ring is a power of two between 4k and 1g";
      r.ring_size = n;
      return "";
    }
  }
}

// One line, comments and blanks already gone.
std::string parse_line(std::string_view line, Rule& r) {
  for (unsigned char c : line)
    if ((c < 0x20 && c != '\t') || c == 0x7f) return "control characters";
  size_t at = 0;
  bool first = true;
  unsigned seen = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    size_t end = at;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end == at) break;
    const std::string_view token = line.substr(at, end - at);
    at = end;
    if (first) {
      first = false;
      if (token == "rdma") {
        r.action = Action::rdma;
      } else if (token == "tcp") {
        r.action = Action::tcp;
      } else {
        return "a rule starts with rdma or tcp";
      }
      continue;
    }
    std::string why = take(token, r, seen);
    if (!why.empty()) return why + ": " + printable(token);
  }
  if (r.action == Action::tcp && r.ring_size) return "ring applies to rdma rules only";
  return "";
}

bool prefix_matches(const Prefix& p, const sockaddr_storage& ss) {
  if (p.bits < 0) return true;
  const uint8_t* a = nullptr;
  bool v6 = false;
  if (ss.ss_family == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in&>(ss).sin_addr);
  } else if (ss.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      a = in6.s6_addr + 12;
    } else {
      a = in6.s6_addr;
      v6 = true;
    }
  } else {
    return false;
  }
  if (v6 != p.v6) return false;
  const int whole = p.bits / 8, rest = p.bits % 8;
  if (std::memcmp(a, p.addr, static_cast<size_t>(whole)) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (p.addr[whole] & mask);
}

uint16_t port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

bool in(const Ports& p, uint16_t port) { return port >= p.lo && port <= p.hi; }

bool program_matches(const Rule& r, std::string_view name, std::string_view path) {
  if (r.program.empty()) return true;
  const std::string subject(r.program.find('/') != std::string::npos ? path : name);
  return fnmatch(r.program.c_str(), subject.c_str(), 0) == 0;
}

bool role_matches(const Rule& r, Role role) { return r.role == Role::any || r.role == role; }

bool has_remote(const Rule& r) {
  return r.remote.bits >= 0 || r.remote_ports.lo != 0 || r.remote_ports.hi != 65535;
}

}  // namespace

std::vector<Rule> parse(std::string_view text, std::string_view name, std::vector<std::string>& problems) {
  std::vector<Rule> out;
  int number = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++number;
    const auto problem = [&](const std::string& why) {
      problems.push_back(printable(name) + ":" + std::to_string(number) + ": " + why + " (rule ignored)");
    };
    if (line.size() > kLongestLine) {
      problem("line longer than " + std::to_string(kLongestLine) + " bytes");
      continue;
    }
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    if (out.size() == kMostRules) {
      problem("more than " + std::to_string(kMostRules) + " rules");
      break;
    }
    Rule r;
    r.line = number;
    if (std::string why = parse_line(line, r); !why.empty()) {
      problem(why);
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

const Rule* match(const std::vector<Rule>& rules, const Subject& who, const sockaddr_storage& local,
                  const sockaddr_storage& peer) {
  const uint16_t lport = port_of(local), rport = port_of(peer);
  for (const Rule& r : rules) {
    if (!role_matches(r, who.role) || !program_matches(r, who.name, who.path)) continue;
    if (!prefix_matches(r.local, local) || !prefix_matches(r.remote, peer)) continue;
    if (!in(r.local_ports, lport) || !in(r.remote_ports, rport)) continue;
    return &r;
  }
  return nullptr;
}

bool listener_may_upgrade(const std::vector<Rule>& rules, std::string_view name, std::string_view path,
                          const sockaddr_storage& local) {
  const uint16_t lport = port_of(local);
  for (const Rule& r : rules) {
    if (!role_matches(r, Role::server) || !program_matches(r, name, path)) continue;
    // A listener on a wildcard address accepts on any local address: only a rule
    // without a local address condition surely applies to all of its connections.
    const bool any_local = r.local.bits < 0;
    if (!any_local && !prefix_matches(r.local, local)) continue;
    if (!in(r.local_ports, lport)) continue;
    if (r.action == Action::rdma) return true;
    if (any_local && !has_remote(r)) return false;
  }
  return true;
}

void load(const char* setting, bool secure, std::vector<std::string>& problems) {
  Loaded& l = loaded();
  l.rules.clear();
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  l.path.assign(exe, n > 0 ? static_cast<size_t>(n) : 0);
  const size_t slash = l.path.rfind('/');
  l.name = slash == std::string::npos ? l.path : l.path.substr(slash + 1);
  const bool chosen = setting && *setting && !secure;
  const std::string file = chosen ? setting : kDefaultFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (chosen || errno != ENOENT) problems.push_back(printable(file) + ": " + std::strerror(errno) + " (no rules)");
    return;
  }
  struct stat st {};
  std::string text;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problems.push_back(printable(file) + ": not a regular file (no rules)");
  } else if (static_cast<uint64_t>(st.st_size) > kLargestFile) {
    problems.push_back(printable(file) + ": larger than 1 MiB (no rules)");
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const long r = real.read(fd, text.data() + got, text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    text.resize(got);
  }
  real.close(fd);
  l.rules = parse(text, file, problems);
}

const std::vector<Rule>& active() noexcept { return loaded().rules; }
std::string_view program_name() noexcept { return loaded().name; }
std::string_view program_path() noexcept { return loaded().path; }

}  // namespace ferry::rules
