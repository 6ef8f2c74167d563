// What the differential semantics programs share: one connected pair per scenario on a
// fresh port, upgraded before the scenario runs when under ferry, and one printed line
// per observable result.
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace semantics {

inline const char* g_ip;
inline int g_port = 7600;
inline int g_upgrades = 0;

inline void show(const char* what, long r) {
  if (r < 0) {
    printf("  %s: -1 %s\n", what, strerrorname_np(errno));
  } else {
    printf("  %s: %ld\n", what, r);
  }
}

// This process's upgraded connections as ferry's counters show them now; -1 when not
// under ferry (no SEMANTICS_STAT_CMD) or unreadable.
inline long upgraded_now() {
  const char* cmd = getenv("SEMANTICS_STAT_CMD");
  if (!cmd) return -1;
  std::string line = std::string(cmd) + " " + std::to_string(getpid());
  FILE* p = popen(line.c_str(), "r");
  char buf[256];
  long up = -1;
  while (p && fgets(buf, sizeof buf, p)) {
    char name[64];
    long v;
    if (sscanf(buf, " %63s %ld", name, &v) == 2 && !strcmp(name, "upgraded")) up = v;
  }
  if (p) pclose(p);
  return up;
}

// Waits until ferry's counters show `n` upgraded connections (only under ferry).
// Whether they did within 60 s: a limit for hangs, past the upgrade window the VM
// scripts give (FERRY_UPGRADE_TIMEOUT_MS=30000), so that an upgrade that cannot finish
// is counted as such first.
inline bool wait_upgraded(int n) {
  if (!getenv("SEMANTICS_STAT_CMD")) return true;
  time_t give_up = time(nullptr) + 60;
  while (time(nullptr) < give_up) {
    if (upgraded_now() >= n) return true;
    usleep(20000);
  }
  fprintf(stderr, "connection %d never reached RDMA\n", n);
  return false;
}

// A listening socket on the next fresh port of `ip`; its address in *a.
inline int fresh_listener(sockaddr_in* a, const char* ip = g_ip) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  *a = sockaddr_in{};
  a->sin_family = AF_INET;
  a->sin_port = htons(static_cast<uint16_t>(++g_port));
  inet_pton(AF_INET, ip, &a->sin_addr);
  if (bind(l, reinterpret_cast<sockaddr*>(a), sizeof *a) || listen(l, 4)) perror("listen");
  return l;
}

// A connected pair (client, server) on a fresh port, with one byte exchanged each way
// (the first data call of each side, which lets the upgrade commit). `setup` sees the
// listening socket before the connection comes.
struct Pair {
  int c = -1, s = -1;
  explicit Pair(void (*setup)(int listener) = nullptr) {
    sockaddr_in a;
    int l = fresh_listener(&a);
    if (setup) setup(l);
    c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) perror("connect");
    s = accept(l, nullptr, nullptr);
    close(l);
    char b = 'h';
    std::thread t([&] {
      char x;
      recv(s, &x, 1, 0);
      send(s, &x, 1, 0);
    });
    send(c, &b, 1, 0);
    recv(c, &b, 1, 0);
    t.join();
    wait_upgraded(g_upgrades += 2);
  }
  ~Pair() {
    if (c >= 0) close(c);
    if (s >= 0) close(s);
  }
};

}  // namespace semantics
