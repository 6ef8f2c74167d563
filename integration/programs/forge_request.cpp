// Sends rdma_cm connect requests with malformed or forged private data to a ferry
// listener, one per case, and prints how each was answered (a ferry server must refuse
// every one). Runs without ferry.
//   forge_request IP PORT
#include "core/proto/wire.h"

#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using ferry::wire::Hello;
using ferry::wire::kHelloSize;

rdma_event_channel* g_events;

// The next event, within `seconds`; null if none came.
rdma_cm_event* next_event(int seconds) {
  pollfd p{g_events->fd, POLLIN, 0};
  if (poll(&p, 1, seconds * 1000) <= 0) return nullptr;
  rdma_cm_event* ev = nullptr;
  return rdma_get_cm_event(g_events, &ev) == 0 ? ev : nullptr;
}

// Resolves a route to addr and sends a request carrying `data`; returns the answer.
std::string request(const sockaddr_in& addr, const std::vector<uint8_t>& data) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(g_events, &id, nullptr, RDMA_PS_TCP) != 0) return "rdma_create_id failed";
  std::string answer = "no answer";
  rdma_cm_event* ev = nullptr;
  if (rdma_resolve_addr(id, nullptr, (sockaddr*)&addr, 2000) == 0 && (ev = next_event(5)) &&
      ev->event == RDMA_CM_EVENT_ADDR_RESOLVED) {
    rdma_ack_cm_event(ev);
    if (rdma_resolve_route(id, 2000) == 0 && (ev = next_event(5)) && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      rdma_ack_cm_event(ev);
      rdma_conn_param p{};
      p.qp_num = 0x4242;  // never used: a ferry server refuses before any QP matters
      p.private_data = data.empty() ? nullptr : data.data();
      p.private_data_len = static_cast<uint8_t>(data.size());
      if (rdma_connect(id, &p) != 0) {
        answer = "rdma_connect failed";
      } else if ((ev = next_event(30))) {
        answer = rdma_event_str(ev->event);
        rdma_ack_cm_event(ev);
      }
    } else {
      answer = "no route";
    }
  } else {
    answer = "no address";
  }
  rdma_destroy_id(id);
  return answer;
}

std::vector<uint8_t> hello_bytes(const Hello& h) {
  std::vector<uint8_t> b(kHelloSize);
  ferry::wire::encode(h, b.data());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: forge_request IP PORT\n");
    return 2;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(atoi(argv[2])));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) return 2;
  g_events = rdma_create_event_channel();
  if (!g_events) {
    perror("rdma_create_event_channel");
    return 1;
  }
  const uint16_t port = ntohs(addr.sin_port);
  Hello good{40000, port, {0x10000, 77, 1 << 16}};
  struct Case {
    const char* name;
    std::vector<uint8_t> data;
  };
  std::vector<Case> cases;
  cases.push_back({"no private data", {}});
  auto truncated = hello_bytes(good);
  truncated.resize(12);
  cases.push_back({"truncated", truncated});
  auto bad_magic = hello_bytes(good);
  bad_magic[0] ^= 0xff;
  cases.push_back({"wrong magic", bad_magic});
  auto bad_version = hello_bytes(good);
  bad_version[4] = 99;
  cases.push_back({"wrong version", bad_version});
  for (uint64_t size : {uint64_t{0}, uint64_t{3000}, uint64_t{1} << 31}) {
    Hello h = good;
    h.ring.size = size;
    cases.push_back({size == 0 ? "ring size 0" : size == 3000 ? "ring size not a power of two" : "ring size 2 GiB",
                     hello_bytes(h)});
  }
  Hello no_addr = good;
  no_addr.ring.addr = 0;
  cases.push_back({"ring address 0", hello_bytes(no_addr)});
  Hello other_port = good;
  other_port.server_port = static_cast<uint16_t>(port + 1);
  cases.push_back({"another server port", hello_bytes(other_port)});
  // Well formed, naming a TCP connection that does not exist: held, then refused.
  cases.push_back({"no such connection", hello_bytes(good)});
  for (const Case& c : cases) printf("%s: %s\n", c.name, request(addr, c.data).c_str());
  rdma_destroy_event_channel(g_events);
  return 0;
}
