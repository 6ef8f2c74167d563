// hot_paths IP MODE ITERATIONS: one hot path, ITERATIONS times, with callgrind's
// collection switched on around the measured calls only. Run it under
//   valgrind --tool=callgrind --collect-atstart=no
// and divide the collected instructions by ITERATIONS. MODE:
//   send_recv  send 64 B on one end of a connection, then recv them on the other (the
//              bytes have arrived before the recv is measured)
//   epoll      epoll_wait on a set of 4 connections that all have data ready
//              (level-triggered, nothing consumed)
//   epoll_ctl  the event-loop pattern of redis-benchmark and libevent: on one connection,
//              EPOLL_CTL_MOD to add EPOLLOUT, MOD back to EPOLLIN, DEL, ADD (four calls)
// Under ferry the connections are upgraded first (SEMANTICS_STAT_CMD names `ferry stat`);
// without RDMA they are ferry's passthrough; without ferry, plain libc.
#include "semantics_pair.h"

#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <valgrind/callgrind.h>

#include <memory>
#include <vector>

using semantics::Pair;

namespace {

void await_readable(int fd, int n) {
  for (int avail = 0; avail < n;) {
    if (ioctl(fd, FIONREAD, &avail) != 0) {
      perror("FIONREAD");
      exit(1);
    }
  }
}

void warm_up(Pair& p) {
  char b[64] = {};
  for (int i = 0; i < 200; ++i) {
    if (send(p.c, b, sizeof b, 0) != 64 || recv(p.s, b, sizeof b, MSG_WAITALL) != 64) {
      perror("warm-up");
      exit(1);
    }
  }
}

int send_recv(int iterations) {
  Pair p;
  warm_up(p);
  char b[64] = {};
  for (int i = 0; i < iterations; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    long sent = send(p.c, b, sizeof b, 0);
    CALLGRIND_TOGGLE_COLLECT;
    await_readable(p.s, 64);
    CALLGRIND_TOGGLE_COLLECT;
    long got = recv(p.s, b, sizeof b, 0);
    CALLGRIND_TOGGLE_COLLECT;
    if (sent != 64 || got != 64) {
      fprintf(stderr, "hot_paths: send %ld recv %ld\n", sent, got);
      return 1;
    }
  }
  return 0;
}

int epoll(int iterations) {
  std::vector<std::unique_ptr<Pair>> pairs;
  int ep = epoll_create1(0);
  for (int i = 0; i < 4; ++i) {
    pairs.push_back(std::make_unique<Pair>());
    warm_up(*pairs.back());
    char b[64] = {};
    send(pairs.back()->c, b, sizeof b, 0);
    await_readable(pairs.back()->s, 64);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, pairs.back()->s, &ev);
  }
  epoll_event evs[8];
  for (int i = 0; i < iterations; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    int n = epoll_wait(ep, evs, 8, 0);
    CALLGRIND_TOGGLE_COLLECT;
    if (n != 4) {
      fprintf(stderr, "hot_paths: epoll_wait reported %d of 4 ready connections\n", n);
      return 1;
    }
  }
  return 0;
}

int epoll_ctl_cycle(int iterations) {
  Pair p;
  warm_up(p);
  int ep = epoll_create1(0);
  epoll_event in{}, out{};
  in.events = EPOLLIN;
  out.events = EPOLLIN | EPOLLOUT;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, p.c, &in) != 0) {
    perror("epoll_ctl");
    return 1;
  }
  for (int i = 0; i < iterations; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    int r = epoll_ctl(ep, EPOLL_CTL_MOD, p.c, &out);
    r |= epoll_ctl(ep, EPOLL_CTL_MOD, p.c, &in);
    r |= epoll_ctl(ep, EPOLL_CTL_DEL, p.c, nullptr);
    r |= epoll_ctl(ep, EPOLL_CTL_ADD, p.c, &in);
    CALLGRIND_TOGGLE_COLLECT;
    if (r != 0) {
      perror("epoll_ctl");
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: hot_paths IP send_recv|epoll|epoll_ctl ITERATIONS\n");
    return 2;
  }
  semantics::g_ip = argv[1];
  semantics::g_port = 7900;
  int iterations = atoi(argv[3]);
  if (!strcmp(argv[2], "send_recv")) return send_recv(iterations);
  if (!strcmp(argv[2], "epoll")) return epoll(iterations);
  if (!strcmp(argv[2], "epoll_ctl")) return epoll_ctl_cycle(iterations);
  fprintf(stderr, "hot_paths: unknown mode %s\n", argv[2]);
  return 2;
}
