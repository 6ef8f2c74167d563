// ferry ss: each connection of running ferry processes (core/base/conn_report.h, read
// through /proc/PID/mem as `ferry stat` reads the counters), beside what the kernel
// says of its socket: addresses, TCP state and bytes (sock_diag, by inode; from
// /proc/PID/net/tcp when the process is in another network namespace, without bytes).
#include "ss.h"

#include "core/base/conn_report.h"
#include "core/base/stats.h"
#include "core/proto/conn_state.h"
#include "processes.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

namespace ferry::launcher {
namespace {

namespace report = conn_report;

// What the kernel says of one TCP socket.
struct Kernel {
  std::string local, peer, state;
  bool bytes = false;  // the counts below are known
  uint64_t sent = 0, received = 0;
};

const char* tcp_state(int s) {
  static const char* const kNames[] = {"?",         "ESTAB",    "SYN-SENT", "SYN-RECV",   "FIN-WAIT-1", "FIN-WAIT-2",
                                       "TIME-WAIT", "UNCONN",   "CLOSE-WAIT", "LAST-ACK", "LISTEN",     "CLOSING"};
  return s > 0 && s < static_cast<int>(sizeof kNames / sizeof kNames[0]) ? kNames[s] : "?";
}

std::string endpoint(int family, const void* addr, uint16_t port) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(family, addr, text, sizeof text);
  return (family == AF_INET6 ? "[" + std::string(text) + "]" : std::string(text)) + ":" + std::to_string(port);
}

// Every TCP socket of this network namespace, by inode, with its bytes (sock_diag).
void diag(int family, std::map<uint64_t, Kernel>& out) {
  const int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return;
  struct {
    nlmsghdr head;
    inet_diag_req_v2 req;
  } ask{};
  ask.head.nlmsg_len = sizeof ask;
  ask.head.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.head.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  ask.req.sdiag_family = static_cast<uint8_t>(family);
  ask.req.sdiag_protocol = IPPROTO_TCP;
  ask.req.idiag_states = ~0u;
  ask.req.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  if (send(nl, &ask, sizeof ask, 0) != static_cast<ssize_t>(sizeof ask)) {
    close(nl);
    return;
  }
  static char buf[1 << 16];
  for (bool done = false; !done;) {
    ssize_t got = recv(nl, buf, sizeof buf, 0);
    if (got <= 0) break;
    unsigned n = static_cast<unsigned>(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        done = true;
        break;
      }
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      Kernel k;
      k.local = endpoint(m->idiag_family, m->id.idiag_src, ntohs(m->id.idiag_sport));
      k.peer = endpoint(m->idiag_family, m->id.idiag_dst, ntohs(m->id.idiag_dport));
      k.state = tcp_state(m->idiag_state);
      int left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
      for (auto* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, left); a = RTA_NEXT(a, left)) {
        if (a->rta_type != INET_DIAG_INFO) continue;
        tcp_info info{};
        memcpy(&info, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof info));
        if (RTA_PAYLOAD(a) >= offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) {
          k.bytes = true;
          k.sent = info.tcpi_bytes_acked;
          k.received = info.tcpi_bytes_received;
        }
      }
      out[m->idiag_inode] = std::move(k);
    }
  }
  close(nl);
}

// The process's TCP sockets from its own network namespace's view, without bytes.
void proc_net(long pid, std::map<uint64_t, Kernel>& out) {
  for (int family : {AF_INET, AF_INET6}) {
    const std::string path = "/proc/" + std::to_string(pid) + "/net/" + (family == AF_INET ? "tcp" : "tcp6");
    FILE* f = fopen(path.c_str(), "re");
    if (!f) continue;
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char la[40], ra[40];
      unsigned lp, rp, st;
      unsigned long long inode;
      if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*s %*s %*s %*s %*s %llu", la, &lp, ra, &rp, &st,
                 &inode) != 6 || out.count(inode))
        continue;
      auto addr = [family](const char* hex) {
        uint32_t w[4] = {};
        for (int i = 0; i < (family == AF_INET ? 1 : 4); ++i) sscanf(hex + 8 * i, "%8x", &w[i]);
        return std::vector<uint32_t>(w, w + 4);
      };
      const auto l = addr(la), r = addr(ra);
      Kernel k;
      k.local = endpoint(family, l.data(), static_cast<uint16_t>(lp));
      k.peer = endpoint(family, r.data(), static_cast<uint16_t>(rp));
      k.state = tcp_state(static_cast<int>(st));
      out[inode] = std::move(k);
    }
    fclose(f);
  }
}

// The process's descriptors of each socket inode (the lowest one).
std::map<uint64_t, int> descriptors(long pid) {
  std::map<uint64_t, int> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char target[64];
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long long inode = 0;
    if (sscanf(target, "socket:[%llu]", &inode) != 1) continue;
    const int fd = atoi(e->d_name);
    auto it = out.find(inode);
    if (it == out.end() || fd < it->second) out[inode] = fd;
  }
  closedir(d);
  return out;
}

// One connection, as printed.
struct Row {
  long pid;
  int fd;
  uint64_t inode;
  std::string role, state, path, why;
  Kernel kernel;
  uint64_t rdma_sent, rdma_received, registered;
  uint32_t qp;
};

std::string why_text(uint16_t code, uint8_t flags) {
  if (code == report::kWhyLoopback) return "loopback";
  if (code > 0)
    if (const char* name = stats::name_at(code - 1)) return name;
  return flags & report::kInherited ? "inherited" : "-";
}

// The entries of process pid; false (with why) if it runs no ferry that can say.
bool read_rows(long pid, std::vector<Row>& rows, std::string& why) {
  static stats::Counters counters;
  why = stats::read_process(pid, counters);
  if (!why.empty()) return false;
  const uint64_t at = counters.report.load();
  if (at == 0) return true;  // no connection yet
  const int mem = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) {
    why = "cannot open /proc/" + std::to_string(pid) + "/mem: " + strerror(errno);
    return false;
  }
  std::vector<report::Entry> table(report::kCapacity);
  const ssize_t want = static_cast<ssize_t>(table.size() * sizeof(report::Entry));
  const ssize_t n = pread(mem, table.data(), static_cast<size_t>(want), static_cast<off_t>(at));
  close(mem);
  if (n != want) {
    why = "cannot read the connection table of process " + std::to_string(pid);
    return false;
  }
  std::map<uint64_t, Kernel> kernel;
  diag(AF_INET, kernel);
  diag(AF_INET6, kernel);
  proc_net(pid, kernel);
  const std::map<uint64_t, int> fds = descriptors(pid);
  for (const report::Entry& e : table) {
    const uint64_t inode = e.inode.load(std::memory_order_relaxed);
    if (inode == 0) continue;
    Row r{pid, -1, inode, {}, {}, {}, {}, {}, e.rdma_sent.load(), e.rdma_received.load(), e.registered.load(),
          e.qp.load()};
    if (auto it = fds.find(inode); it != fds.end()) r.fd = it->second;
    if (auto it = kernel.find(inode); it != kernel.end()) r.kernel = it->second;
    r.role = e.role.load() == report::kClient ? "client" : "server";
    // A connecting end's acknowledged bytes count its SYN.
    if (e.role.load() == report::kClient && r.kernel.sent > 0) --r.kernel.sent;
    const uint8_t s = e.state.load();
    if (s == report::kKernel) {
      r.state = "tcp";
      r.path = "tcp";
    } else {
      const auto cs = static_cast<ConnState>(s - report::kLinked);
      r.state = to_string(cs);
      r.path = transport_of(cs) == Transport::rdma ? "rdma" : cs == ConnState::handshake ? "tcp>rdma" : "tcp";
    }
    r.why = why_text(e.why.load(), e.flags.load());
    rows.push_back(std::move(r));
  }
  return true;
}

std::string count(const Kernel& k, bool sent) {
  return k.bytes ? std::to_string(sent ? k.sent : k.received) : "-";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

int ss(int argc, char** argv, int at) {
  bool json = false;
  std::vector<long> pids;
  for (; at < argc; ++at) {
    if (!strcmp(argv[at], "-j") || !strcmp(argv[at], "--json")) {
      json = true;
      continue;
    }
    char* end = nullptr;
    const long pid = strtol(argv[at], &end, 10);
    if (!end || *end || pid <= 0) {
      fprintf(stderr, "ferry ss: not a process id: %s\n", argv[at]);
      return 2;
    }
    pids.push_back(pid);
  }
  const bool all = pids.empty();
  std::vector<Row> rows;
  size_t processes = 0;
  int status = 0;
  for (long pid : all ? processes_of_user() : pids) {
    std::string why;
    if (!read_rows(pid, rows, why)) {
      if (!all) {
        fprintf(stderr, "ferry ss: %s\n", why.c_str());
        status = 1;
      }
      continue;
    }
    ++processes;
  }
  if (json) {
    printf("[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      printf("%s\n {\"pid\": %ld, \"fd\": %d, \"inode\": %llu, \"role\": \"%s\", \"state\": \"%s\", \"path\": \"%s\", "
             "\"why\": %s, \"local\": %s, \"peer\": %s, \"tcp_state\": %s, \"tcp_sent\": %s, \"tcp_received\": %s, "
             "\"rdma_sent\": %llu, \"rdma_received\": %llu, \"registered\": %llu, \"qp\": %u}",
             i ? "," : "", r.pid, r.fd, static_cast<unsigned long long>(r.inode), r.role.c_str(), r.state.c_str(),
             r.path.c_str(), r.why == "-" ? "null" : json_string(r.why).c_str(), json_string(r.kernel.local).c_str(),
             json_string(r.kernel.peer).c_str(), json_string(r.kernel.state).c_str(),
             r.kernel.bytes ? std::to_string(r.kernel.sent).c_str() : "null",
             r.kernel.bytes ? std::to_string(r.kernel.received).c_str() : "null",
             static_cast<unsigned long long>(r.rdma_sent), static_cast<unsigned long long>(r.rdma_received),
             static_cast<unsigned long long>(r.registered), r.qp);
    }
    printf("%s]\n", rows.empty() ? "" : "\n");
    return status;
  }
  printf("%-7s %-4s %-6s %-11s %-8s %-24s %-24s %-10s %-18s %12s %12s %12s %12s %10s %6s\n", "PID", "FD", "ROLE",
         "STATE", "PATH", "LOCAL", "PEER", "TCP", "WHY", "TCP_SENT", "TCP_RECV", "RDMA_SENT", "RDMA_RECV", "REGISTERED",
         "QP");
  size_t on_rdma = 0;
  for (const Row& r : rows) {
    on_rdma += r.path == "rdma";
    printf("%-7ld %-4s %-6s %-11s %-8s %-24s %-24s %-10s %-18s %12s %12s %12llu %12llu %10llu %6s\n", r.pid,
           r.fd >= 0 ? std::to_string(r.fd).c_str() : "-", r.role.c_str(), r.state.c_str(), r.path.c_str(),
           r.kernel.local.empty() ? "-" : r.kernel.local.c_str(), r.kernel.peer.empty() ? "-" : r.kernel.peer.c_str(),
           r.kernel.state.empty() ? "-" : r.kernel.state.c_str(), r.why.c_str(), count(r.kernel, true).c_str(),
           count(r.kernel, false).c_str(), static_cast<unsigned long long>(r.rdma_sent),
           static_cast<unsigned long long>(r.rdma_received), static_cast<unsigned long long>(r.registered),
           r.qp ? std::to_string(r.qp).c_str() : "-");
  }
  printf("%zu connection%s in %zu process%s: %zu over RDMA, %zu on kernel TCP\n", rows.size(),
         rows.size() == 1 ? "" : "s", processes, processes == 1 ? "" : "es", on_rdma, rows.size() - on_rdma);
  return status;
}

}  // namespace ferry::launcher
