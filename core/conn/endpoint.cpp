#include "core/conn/endpoint.h"

#include "core/base/libc.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>

#include <cstddef>
#include <cstring>

namespace ferry::endpoint {

std::string ip_text(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  } else if (a->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      inet_ntop(AF_INET, &v6.s6_addr[12], buf, sizeof buf);
    } else {
      inet_ntop(AF_INET6, &v6, buf, sizeof buf);
    }
  }
  return buf;
}

uint16_t port_of(const sockaddr* a) {
  if (a->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
  if (a->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
  return 0;
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  return IN6_IS_ADDR_LOOPBACK(&v6);
}

void unmap(sockaddr_storage& a) {
  if (a.ss_family != AF_INET6) return;
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&a);
  if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) return;
  sockaddr_in s4{};
  s4.sin_family = AF_INET;
  s4.sin_port = s6->sin6_port;
  memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
  memset(&a, 0, sizeof a);
  memcpy(&a, &s4, sizeof s4);
}

std::string conn_key(const sockaddr* peer, uint16_t peer_port, uint16_t local_port) {
  // Raw bytes, no formatting: a server makes one per accepted connection. An IPv4 key
  // (9 bytes) fits in the string's own buffer.
  char k[1 + 16 + 4];
  size_t n = 1;
  const uint8_t* ip = nullptr;
  size_t ip_len = 0;
  if (peer->sa_family == AF_INET) {
    ip = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(peer)->sin_addr);
    ip_len = 4;
  } else if (peer->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(peer)->sin6_addr;
    const bool mapped = IN6_IS_ADDR_V4MAPPED(&v6);
    ip = mapped ? &v6.s6_addr[12] : v6.s6_addr;
    ip_len = mapped ? 4 : 16;
  }
  k[0] = ip_len == 4 ? '4' : ip_len == 16 ? '6' : '?';
  if (ip_len) memcpy(k + n, ip, ip_len);
  n += ip_len;
  for (uint16_t port : {peer_port, local_port}) {
    k[n++] = static_cast<char>(port >> 8);
    k[n++] = static_cast<char>(port & 0xff);
  }
  return std::string(k, n);
}

bool addresses(int fd, sockaddr_storage& local, sockaddr_storage& peer) {
  socklen_t l = sizeof local, p = sizeof peer;
  return real.getsockname(fd, reinterpret_cast<sockaddr*>(&local), &l) == 0 &&
         real.getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &p) == 0 &&
         (peer.ss_family == AF_INET || peer.ss_family == AF_INET6);
}

namespace {
// The kernel's TCP states (tcpi_state), as include/net/tcp_states.h numbers them.
enum : uint8_t { kFinWait1 = 4, kFinWait2 = 5, kTimeWait = 6, kCloseWait = 8, kLastAck = 9, kClosing = 11 };
}  // namespace

TcpCounts tcp_counts_of(const TcpSnapshot& k, bool client) {
  // The kernel counts a SYN and a FIN as one sequence number each, and SIOCINQ leaves
  // out a FIN that arrived; none of them is a byte of the stream.
  const bool fin_out = k.state == kFinWait1 || k.state == kFinWait2 || k.state == kClosing ||
                       k.state == kTimeWait || k.state == kLastAck;
  const bool fin_in = k.state == kCloseWait || k.state == kLastAck || k.state == kClosing ||
                      k.state == kTimeWait;
  const uint64_t syn = client && k.acked > 0 ? 1 : 0;
  TcpCounts c;
  c.sent = k.acked + k.outq - syn - (fin_out && k.acked + k.outq > syn ? 1 : 0);
  c.received = k.received - k.inq - (fin_in && k.received > k.inq ? 1 : 0);
  return c;
}

namespace {

bool info_of(int fd, tcp_info& ti) {
  socklen_t len = sizeof ti;
  return real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
         len >= offsetof(tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received;
}

// Tries at a still moment before giving up: each needs the peer to send or acknowledge
// nothing for the span of four system calls.
constexpr int kSnapshotTries = 1000;

}  // namespace

bool tcp_counts(int fd, bool client, uint64_t& sent, uint64_t& received) {
  // The queue lengths and the kernel's totals come from separate calls, and a segment
  // or an acknowledgment arriving between them would skew the sum: a count short by the
  // bytes that arrived leaves the stream waiting for them forever at the cutover. A
  // snapshot counts only when the totals did not move across the queue lengths' reads.
  for (int i = 0; i < kSnapshotTries; ++i) {
    tcp_info before{}, after{};
    int outq = 0, inq = 0;
    if (!info_of(fd, before) || real.ioctl(fd, SIOCOUTQ, &outq) != 0 || real.ioctl(fd, SIOCINQ, &inq) != 0 ||
        !info_of(fd, after))
      return false;
    if (before.tcpi_bytes_acked != after.tcpi_bytes_acked || before.tcpi_bytes_received != after.tcpi_bytes_received ||
        before.tcpi_state != after.tcpi_state)
      continue;
    const TcpCounts c = tcp_counts_of(TcpSnapshot{after.tcpi_state, after.tcpi_bytes_acked, after.tcpi_bytes_received,
                                                  static_cast<uint64_t>(outq), static_cast<uint64_t>(inq)},
                                      client);
    sent = c.sent;
    received = c.received;
    return true;
  }
  return false;
}

}  // namespace ferry::endpoint
