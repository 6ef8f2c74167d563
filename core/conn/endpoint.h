// Facts about one TCP connection's endpoints that the upgrade needs: addresses as
// rdma_cm and the request matching want them, and the kernel's own byte counts.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace ferry::endpoint {

// The address as one string for matching; v4-mapped IPv6 addresses read as IPv4.
std::string ip_text(const sockaddr* a);
uint16_t port_of(const sockaddr* a);
bool is_loopback(const sockaddr* a);
// rdma_cm wants plain IPv4 for v4-mapped peers.
void unmap(sockaddr_storage& a);
// What a server matches an upgrade request by: the peer's address, the peer's port and
// the local port, as bytes (a v4-mapped address as its IPv4 one); the first byte is
// '4', '6' or '?', so keys of one kind all have one length.
std::string conn_key(const sockaddr* peer, uint16_t peer_port, uint16_t local_port);
// fd's own and its peer's address; false unless it is a connected IPv4/IPv6 socket.
bool addresses(int fd, sockaddr_storage& local, sockaddr_storage& peer);
// The bytes the program has already written to and read from the TCP socket (a
// connection may be set up after some traffic, e.g. a non-blocking connect settled by
// its first send): the kernel's acknowledged and queued counts, read at a moment when
// no segment arrived in between. False when the kernel cannot say, and then the
// connection must stay on TCP.
bool tcp_counts(int fd, bool client, uint64_t& sent, uint64_t& received);

// One consistent reading of the kernel's counts (tcp_info's state, bytes_acked and
// bytes_received; SIOCOUTQ and SIOCINQ).
struct TcpSnapshot {
  uint8_t state;
  uint64_t acked, received, outq, inq;
};
struct TcpCounts {
  uint64_t sent = 0, received = 0;
};
// The stream's byte counts in a snapshot: the connecting side's acknowledged count
// includes its SYN, and a FIN sent or received takes a sequence number too.
TcpCounts tcp_counts_of(const TcpSnapshot& k, bool client);

}  // namespace ferry::endpoint
