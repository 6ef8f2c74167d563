// Per-process counters. Relaxed atomic increments only. They live at the start of the
// fork page (core/base/fork_page.ld), where `ferry stat PID` finds and reads them in a
// running process, and FERRY_STATS=1 prints them at exit.
#pragma once

#include "core/base/fork_path.h"
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::stats {

// FERRY_STAT(name, description)
#define FERRY_STATS_LIST(X)                                                       \
  X(tcp_sockets, "TCP sockets tracked (created, accepted, inherited or received)") \
  X(listeners, "TCP sockets that listened")                                       \
  X(connections_active, "connections established by connect()")                  \
  X(connections_passive, "connections accepted")                                 \
  X(connections_on_tcp, "connections carried by kernel TCP")                     \
  X(upgrades_started, "connections that started an RDMA upgrade")                \
  X(upgraded, "connections on RDMA: bound to their TCP connection (core/conn/binding.h)")                                    \
  X(tcp_no_rdma, "kept on TCP: no usable RDMA device in this process")           \
  X(tcp_no_route, "kept on TCP: no RDMA route to the peer")                      \
  X(tcp_device_excluded, "kept on TCP: the route's device is not in FERRY_DEVICES") \
  X(tcp_rule, "kept on TCP: a rule of the rules file (FERRY_RULES)")                  \
  X(tcp_io_uring, "kept on TCP: the process uses io_uring (core/base/tcp_only.h)")    \
  X(tcp_credentials, "kept on TCP: the process changed its credentials (core/base/tcp_only.h)") \
  X(tcp_peer_refused, "kept on TCP: the peer refused or runs no ferry")          \
  X(tcp_timeout, "kept on TCP: the upgrade did not finish in time")              \
  X(tcp_resources, "kept on TCP: a QP, CQ or MR could not be created")           \
  X(tcp_other_listener, "kept on TCP: accepted on a listener of a process that cannot redirect here") \
  X(requests_redirected, "upgrade requests sent on to the process of the tree that serves the connection") \
  X(upgrades_redirected, "upgrades asked again where the server's listening process sent them") \
  X(upgrades_reclaimed, "upgrades a forked child started on a connection its parent had not used") \
  X(requests_malformed, "upgrade requests rejected: malformed or forged")        \
  X(requests_unmatched, "upgrade requests rejected: no such TCP connection")     \
  X(requests_dropped, "upgrade requests rejected: too many held (from the peer's address, or in all)") \
  X(upgrades_forged, "upgrades refused: the RDMA peer could not prove it holds the TCP connection") \
  X(upgrades_unproven, "upgrades that stayed on TCP: no proof came from the peer (TCP ended, it waited too long, or its RDMA side failed first)") \
  X(downgrades_failover, "connections that went back to TCP: their RDMA side failed") \
  X(downgrades_peer, "connections that went back to TCP: the peer went back first") \
  X(downgrades_handoff, "connections that went back to TCP: handed to another program by either end") \
  X(downgrade_resets, "connections reset: the RDMA side failed where no stream could resume") \
  X(bytes_resent, "bytes sent again over TCP after a downgrade (the peer had not confirmed them)") \
  X(rdma_registered_bytes, "registered memory of live upgraded connections")     \
  X(rdma_registered_most, "the most memory registered at once, connections being set up included") \
  X(poller_wakeups, "times the poller thread woke up")                           \
  X(cq_polls, "completion-queue polls that found completions")                  \
  X(waits, "times a blocking call slept")                                         \
  X(sleep_notices, "times a receiver told its peer it sleeps (asking for waking writes)") \
  X(ready_sleeps, "times epoll/poll/select slept watching TCP sockets ferry tracks") \
  X(bytes_tcp_sent, "bytes sent on tracked sockets through kernel TCP")          \
  X(bytes_tcp_received, "bytes received on tracked sockets through kernel TCP")  \
  X(bytes_rdma_sent, "bytes sent over RDMA")                                     \
  X(bytes_rdma_received, "bytes received over RDMA")

constexpr uint64_t kMagic = 0x3376617473797266;  // "frystav3"

// At the start of the fork page (core/base/fork_path.h): the hot path addresses the counters
// directly with no pointer to follow, and a forked process's writes to them cost no
// page but the one it writes anyway. Whole cache lines: the data after them is read by
// every lock.
// The byte counters are added to on every send and receive of a tracked socket, by
// whichever thread makes it: each has a cache line of its own. The rest change at
// connection events and share lines.
constexpr size_t alignment_of(std::string_view name) { return name.starts_with("bytes_") ? 64 : 8; }
struct alignas(64) Counters {
  uint64_t magic = kMagic;
  uint64_t pid = 0;
  // Where the process's connection table is (core/base/conn_report.h, kCapacity
  // entries); 0 until the first connection.
  std::atomic<uint64_t> report{0};
#define FERRY_STAT_FIELD(name, desc) alignas(alignment_of(#name)) std::atomic<uint64_t> name{0};
  FERRY_STATS_LIST(FERRY_STAT_FIELD)
#undef FERRY_STAT_FIELD
};
static_assert(sizeof(Counters) <= 1024);

extern Counters g;

// In a forked child: its own counters, from zero (on the page the fork makes it write
// anyway; its pid is left 0, for whoever prints them to fill in).
FERRY_FORK_PATH void after_fork_child() noexcept;

// Reads the counters of a running ferry process (out.pid is pid); "" on success, else
// why not. They are found as a debugger would find a variable: the objects the process
// mapped (/proc/PID/maps), the one whose section headers have the fork page, read
// through /proc/PID/mem.
std::string read_process(long pid, Counters& out);

// A counter's place in FERRY_STATS_LIST (0 for the first), or -1 if `c` is none of g's.
int index_of(const std::atomic<uint64_t>& c) noexcept;
// The name of the counter at that place, or nullptr.
const char* name_at(int index) noexcept;

inline void add(std::atomic<uint64_t>& c, uint64_t n) noexcept { c.fetch_add(n, std::memory_order_relaxed); }

// True when every counter reads 0.
bool all_zero(const Counters& c) noexcept;

// "name value  # description" lines, one per counter.
std::string format(const Counters& c);

}  // namespace ferry::stats
