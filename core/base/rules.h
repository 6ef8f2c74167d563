// The rules file (FERRY_RULES, default /etc/ferry/ferry.conf when it exists): which
// connections try RDMA and which stay on kernel TCP, chosen by program, role, addresses
// and ports, with per-rule settings. One rule per line, the first that matches a
// connection decides; a connection no rule matches tries RDMA. config/ferry.conf.example
// documents the syntax:
//
//   tcp  role=server local-port=5432           # a database's port stays on TCP
//   rdma program=redis-* ring=1m               # redis over RDMA, 1 MiB rings
//   tcp  remote=10.1.0.0/16 remote-port=80-89
//
// Parsing and matching are pure (tests/rules_test.cpp); the process loads its rules
// once, at start.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::rules {

enum class Action : uint8_t { rdma, tcp };
enum class Role : uint8_t { any, client, server };

// An address prefix: IPv4 (an IPv4-mapped IPv6 address counts as IPv4) or IPv6.
struct Prefix {
  bool v6 = false;
  uint8_t addr[16] = {};
  int bits = -1;  // -1: any address
};

struct Ports {
  uint16_t lo = 0, hi = 65535;
};

struct Rule {
  Action action = Action::rdma;
  std::string program;  // a glob: matched against the path when it holds '/', else the name
  Role role = Role::any;
  Prefix local, remote;
  Ports local_ports, remote_ports;
  uint64_t ring_size = 0;  // 0: FERRY_RING_SIZE
  int line = 0;
};

// Parses the text of a rules file named `name`. A malformed line adds one problem
// naming name:line and is left out; the others stand.
std::vector<Rule> parse(std::string_view text, std::string_view name, std::vector<std::string>& problems);

// Whom a connection is: the program (its name and path), its role and its addresses.
struct Subject {
  std::string_view name, path;
  Role role = Role::client;
};

// The first rule matching a connection between local and peer, or nullptr.
const Rule* match(const std::vector<Rule>& rules, const Subject& who, const sockaddr_storage& local,
                  const sockaddr_storage& peer);

// Whether some connection accepted on a listener at `local` may go over RDMA: false
// when the first rule that could match every such connection (one with no remote
// condition) keeps them on TCP, with no RDMA rule before it that some could match.
bool listener_may_upgrade(const std::vector<Rule>& rules, std::string_view name, std::string_view path,
                          const sockaddr_storage& local);

// The process's rules: loaded by load() at start (FERRY_RULES, else the default file if
// it exists; `secure`: only the default file), read-only afterwards.
void load(const char* setting, bool secure, std::vector<std::string>& problems);
const std::vector<Rule>& active() noexcept;
// The program's name and path (/proc/self/exe), read at load().
std::string_view program_name() noexcept;
std::string_view program_path() noexcept;

inline constexpr const char* kDefaultFile = "/etc/ferry/ferry.conf";

}  // namespace ferry::rules
