// Per-process counters. Relaxed atomic increments only; read by FERRY_STATS at exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace ferry::stats {

// FERRY_STAT(name, description)
#define FERRY_STATS_LIST(X)                                                       \
  X(tcp_sockets, "TCP sockets tracked (created, accepted, inherited or received)") \
  X(listeners, "TCP sockets that listened")                                       \
  X(connections_active, "connections established by connect()")                  \
  X(connections_passive, "connections accepted")                                 \
  X(connections_on_tcp, "connections carried by kernel TCP")                     \
  X(bytes_tcp_sent, "bytes sent on tracked sockets through kernel TCP")          \
  X(bytes_tcp_received, "bytes received on tracked sockets through kernel TCP")  \
  X(bytes_rdma_sent, "bytes sent over RDMA")                                     \
  X(bytes_rdma_received, "bytes received over RDMA")

struct Counters {
#define FERRY_STAT_FIELD(name, desc) alignas(64) std::atomic<uint64_t> name{0};
  FERRY_STATS_LIST(FERRY_STAT_FIELD)
#undef FERRY_STAT_FIELD
};

extern Counters g;

inline void add(std::atomic<uint64_t>& c, uint64_t n) noexcept { c.fetch_add(n, std::memory_order_relaxed); }

// "name value  # description" lines, one per counter.
std::string format(const Counters& c);
// In a forked child the parent's counts are not the child's.
void reset(Counters& c) noexcept;

}  // namespace ferry::stats
