// Readiness semantics (epoll, poll, select) over one TCP connection per scenario, both
// ends in this process. Prints one line per observable result; run plainly and under
// ferry (where each connection is on RDMA before its scenario starts), the outputs
// must be identical. Waits that expect an event use long timeouts; waits that expect
// none use zero or short ones, so no line depends on timing.
//   readiness_semantics IP
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "semantics_pair.h"

namespace {

using namespace semantics;

constexpr int kLong = 10000;  // ms: an expected event arrives well before this

std::string names(uint32_t ev) {
  std::string s;
  const std::pair<uint32_t, const char*> bits[] = {{EPOLLIN, "IN"},     {EPOLLPRI, "PRI"}, {EPOLLOUT, "OUT"},
                                                   {EPOLLRDHUP, "RDHUP"}, {EPOLLHUP, "HUP"}, {EPOLLERR, "ERR"}};
  for (auto& [bit, name] : bits)
    if (ev & bit) s += s.empty() ? name : std::string("|") + name;
  return s.empty() ? "-" : s;
}

void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Prints what one epoll_wait returns: the count and each event as fd:names.
void show_wait(const char* what, int ep, int timeout_ms) {
  epoll_event evs[8];
  int n = epoll_wait(ep, evs, 8, timeout_ms);
  if (n < 0) return show(what, n);
  std::string s;
  for (int i = 0; i < n; ++i) s += " " + std::string(evs[i].data.u32 == 0 ? "c" : "s") + ":" + names(evs[i].events);
  printf("  %s: %d%s\n", what, n, s.c_str());
}

int add(int ep, int fd, uint32_t events, uint32_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

void level_triggered() {
  puts("epoll level-triggered");
  Pair p;
  nonblock(p.c);
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 0);
  show_wait("idle", ep, 0);
  show("peer send 10", send(p.s, "0123456789", 10, 0));
  show_wait("after data", ep, kLong);
  show_wait("again", ep, 0);
  char buf[16];
  show("read", read(p.c, buf, sizeof buf));
  show_wait("drained", ep, 0);
  close(ep);
}

void edge_triggered() {
  puts("epoll edge-triggered");
  Pair p;
  nonblock(p.c);
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN | EPOLLET, 0);
  show_wait("idle", ep, 0);
  show("peer send 5", send(p.s, "01234", 5, 0));
  show_wait("after data", ep, kLong);
  show_wait("again", ep, 0);
  show("peer send 5", send(p.s, "56789", 5, 0));
  show_wait("after more data", ep, kLong);
  char buf[16];
  show("read", read(p.c, buf, sizeof buf));
  show("read again", read(p.c, buf, sizeof buf));
  show_wait("drained", ep, 0);
  close(ep);
}

void oneshot() {
  puts("epoll one-shot");
  Pair p;
  nonblock(p.c);
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN | EPOLLONESHOT, 0);
  show("peer send 3", send(p.s, "abc", 3, 0));
  show_wait("first", ep, kLong);
  show_wait("disabled", ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = 0;
  show("rearm", epoll_ctl(ep, EPOLL_CTL_MOD, p.c, &ev));
  show_wait("rearmed", ep, 0);
  close(ep);
}

void ctl_errors() {
  puts("epoll_ctl errors");
  Pair p;
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  show("add", epoll_ctl(ep, EPOLL_CTL_ADD, p.c, &ev));
  show("add again", epoll_ctl(ep, EPOLL_CTL_ADD, p.c, &ev));
  show("mod unregistered", epoll_ctl(ep, EPOLL_CTL_MOD, p.s, &ev));
  show("del unregistered", epoll_ctl(ep, EPOLL_CTL_DEL, p.s, &ev));
  show("add itself", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  show("add exclusive", epoll_ctl(ep, EPOLL_CTL_ADD, p.s, &ev));
  show("mod exclusive", epoll_ctl(ep, EPOLL_CTL_MOD, p.s, &ev));
  ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT;
  show("exclusive+oneshot", epoll_ctl(ep, EPOLL_CTL_ADD, p.s, &ev));
  show("del", epoll_ctl(ep, EPOLL_CTL_DEL, p.c, nullptr));
  show("mod after del", epoll_ctl(ep, EPOLL_CTL_MOD, p.c, &ev));
  show("wait maxevents 0", epoll_wait(ep, &ev, 0, 0));
  close(ep);
}

void several_sets_and_variants() {
  puts("one socket in two epoll sets; epoll_pwait, epoll_pwait2; EPERM, ELOOP");
  Pair p;
  int a = epoll_create1(0), b = epoll_create1(0);
  add(a, p.c, EPOLLIN, 0);
  add(b, p.c, EPOLLIN | EPOLLET, 0);
  show("peer send", send(p.s, "xy", 2, 0));
  show_wait("set a", a, kLong);
  show_wait("set b", b, kLong);
  show_wait("set a again", a, 0);
  show_wait("set b again", b, 0);
  epoll_event ev[2];
  timespec zero{0, 0};
  show("epoll_pwait2 zero timeout", epoll_pwait2(a, ev, 2, &zero, nullptr));
  // A signal blocked by epoll_pwait's mask does not interrupt it.
  struct sigaction sa{};
  sa.sa_handler = [](int) {};
  sigaction(SIGALRM, &sa, nullptr);
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGALRM);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &block, &old);
  char c[2];
  show("read", read(p.c, c, 2));
  itimerval it{{0, 0}, {0, 50000}};
  setitimer(ITIMER_REAL, &it, nullptr);
  show("epoll_pwait, SIGALRM masked", epoll_pwait(a, ev, 2, 300, &block));
  sigset_t pending;
  sigpending(&pending);
  printf("  SIGALRM pending afterwards: %d\n", sigismember(&pending, SIGALRM));
  sigprocmask(SIG_SETMASK, &old, nullptr);
  char path[] = "/tmp/readiness_semantics.XXXXXX";
  int file = mkstemp(path);
  unlink(path);
  epoll_event one{};
  one.events = EPOLLIN;
  show("add a regular file", epoll_ctl(a, EPOLL_CTL_ADD, file, &one));
  close(file);
  show("add set b to set a", epoll_ctl(a, EPOLL_CTL_ADD, b, &one));
  show("add set a to set b", epoll_ctl(b, EPOLL_CTL_ADD, a, &one));
  close(a);
  close(b);
}

void peer_shutdown_and_close() {
  puts("peer shutdown, local shutdown, peer close");
  Pair p;
  nonblock(p.c);
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 0);
  show("peer shutdown SHUT_WR", shutdown(p.s, SHUT_WR));
  show_wait("after peer's FIN", ep, kLong);
  char buf[8];
  show("read", read(p.c, buf, sizeof buf));
  show("shutdown SHUT_WR", shutdown(p.c, SHUT_WR));
  show_wait("both shut", ep, kLong);
  close(ep);
}

// The peer's FIN after some data: whatever reached this end before a call is in that
// call's answer, at every count of earlier looks (each round is one more look).
void fin_after_data() {
  puts("peer's FIN after data, in the next answer");
  for (int round = 0; round < 10; ++round) {
    Pair p;
    nonblock(p.c);
    int ep = epoll_create1(0);
    add(ep, p.c, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 0);
    char buf[8];
    for (int i = 0; i < round; ++i) {
      send(p.s, "x", 1, 0);
      pollfd f{p.c, POLLIN, 0};
      poll(&f, 1, kLong);
      (void)!read(p.c, buf, sizeof buf);
    }
    show("peer shutdown SHUT_WR", shutdown(p.s, SHUT_WR));
    if (round % 2) {
      show_wait("epoll after peer's FIN", ep, 0);
    } else {
      pollfd f{p.c, POLLIN | POLLOUT | POLLRDHUP, 0};
      show("poll after peer's FIN", poll(&f, 1, 0));
      printf("  revents: %s\n", names(static_cast<uint32_t>(f.revents)).c_str());
    }
    close(ep);
  }
}

void backpressure() {
  puts("backpressure");
  Pair p;
  nonblock(p.c);
  static char chunk[65536];
  long total = 0, r;
  while ((r = send(p.c, chunk, sizeof chunk, 0)) > 0) total += r;
  show("send when full", r);
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLOUT, 0);
  epoll_event ev;
  printf("  writable when full: %s\n", epoll_wait(ep, &ev, 1, 0) == 0 ? "no" : "yes");
  long got = 0;
  while (got < total) {
    long n = recv(p.s, chunk, sizeof chunk, 0);
    if (n <= 0) break;
    got += n;
  }
  printf("  peer read everything: %s\n", got == total ? "yes" : "no");
  show_wait("after the peer read", ep, kLong);
  show("send again", send(p.c, chunk, 1, 0) == 1 ? 1 : -1);
  close(ep);
}

void poll_mixed_with_pipe() {
  puts("poll over a socket and a pipe");
  Pair p;
  int pfd[2];
  if (pipe(pfd) != 0) return;
  pollfd f[3] = {{p.c, POLLIN | POLLOUT | POLLRDHUP, 0}, {pfd[0], POLLIN, 0}, {-1, POLLIN, 0}};
  show("poll idle", poll(f, 3, 0));
  printf("  revents: c=%s pipe=%s\n", names(static_cast<uint32_t>(f[0].revents)).c_str(),
         names(static_cast<uint32_t>(f[1].revents)).c_str());
  f[0].events = POLLIN;
  show("poll nothing", poll(f, 3, 50));
  show("write pipe", write(pfd[1], "x", 1));
  show("poll pipe", poll(f, 3, kLong));
  printf("  revents: c=%s pipe=%s\n", names(static_cast<uint32_t>(f[0].revents)).c_str(),
         names(static_cast<uint32_t>(f[1].revents)).c_str());
  char x;
  show("read pipe", read(pfd[0], &x, 1));
  show("peer send", send(p.s, "xy", 2, 0));
  show("poll socket", poll(f, 3, kLong));
  printf("  revents: c=%s pipe=%s\n", names(static_cast<uint32_t>(f[0].revents)).c_str(),
         names(static_cast<uint32_t>(f[1].revents)).c_str());
  close(pfd[0]);
  close(pfd[1]);
}

void select_mixed() {
  puts("select");
  Pair p;
  fd_set r, w;
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(p.c, &r);
  FD_SET(p.c, &w);
  int nfds = p.c + 1;
  timeval tv{0, 0};
  show("select idle", select(nfds, &r, &w, nullptr, &tv));
  printf("  readable=%d writable=%d\n", FD_ISSET(p.c, &r) ? 1 : 0, FD_ISSET(p.c, &w) ? 1 : 0);
  show("peer send", send(p.s, "z", 1, 0));
  FD_ZERO(&r);
  FD_SET(p.c, &r);
  tv = {kLong / 1000, 0};
  show("select data", select(nfds, &r, nullptr, nullptr, &tv));
  printf("  readable=%d\n", FD_ISSET(p.c, &r) ? 1 : 0);
  int closed = dup(0);
  close(closed);
  FD_ZERO(&r);
  FD_SET(p.c, &r);
  FD_SET(closed, &r);
  tv = {0, 0};
  show("select with a closed fd", select(std::max(p.c, closed) + 1, &r, nullptr, nullptr, &tv));
}

void nested_epoll() {
  puts("epoll inside poll and inside epoll");
  Pair p;
  int inner = epoll_create1(0);
  add(inner, p.c, EPOLLIN, 0);
  int outer = epoll_create1(0);
  add(outer, inner, EPOLLIN, 1);
  pollfd f{inner, POLLIN, 0};
  show("poll inner idle", poll(&f, 1, 0));
  show("peer send", send(p.s, "n", 1, 0));
  show("poll inner", poll(&f, 1, kLong));
  show_wait("outer", outer, kLong);
  show_wait("inner", inner, 0);
  close(outer);
  close(inner);
}

void close_removes() {
  puts("close removes a registration");
  Pair a, b;
  int ep = epoll_create1(0);
  add(ep, a.c, EPOLLIN, 0);
  add(ep, b.c, EPOLLIN, 1);
  close(a.c);
  a.c = -1;
  show("peer b send", send(b.s, "q", 1, 0));
  show_wait("events", ep, kLong);
  close(ep);
}

std::atomic<int> g_woken{0};

void wakeups() {
  puts("a thread sleeping in epoll_wait");
  Pair p;
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN, 0);
  int n = -2;
  std::thread t([&] {
    epoll_event ev;
    n = epoll_wait(ep, &ev, 1, -1);
  });
  usleep(100000);  // ordering only: the thread is most likely asleep by now
  show("peer send", send(p.s, "w", 1, 0));
  t.join();
  show("woken with", n);
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_woken.fetch_add(1); };
  sigaction(SIGALRM, &sa, nullptr);  // no SA_RESTART
  char c;
  show("read", read(p.c, &c, 1));
  itimerval it{{0, 0}, {0, 100000}};
  setitimer(ITIMER_REAL, &it, nullptr);
  epoll_event ev;
  show("epoll_wait with a signal", epoll_wait(ep, &ev, 1, -1));
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, nullptr);
  setitimer(ITIMER_REAL, &it, nullptr);
  pollfd f{p.c, POLLIN, 0};
  show("poll with a SA_RESTART signal", poll(&f, 1, -1));
  close(ep);
}

void nonblocking_connect() {
  puts("non-blocking connect");
  sockaddr_in a;
  int l = fresh_listener(&a);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  show("connect", connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a));
  pollfd f{c, POLLOUT, 0};
  show("poll writable", poll(&f, 1, kLong));
  int err = -1;
  socklen_t len = sizeof err;
  getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len);
  printf("  SO_ERROR: %d\n", err);
  int s = accept4(l, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  printf("  accept4 flags: nonblock=%d cloexec=%d\n", (fcntl(s, F_GETFL) & O_NONBLOCK) ? 1 : 0,
         (fcntl(s, F_GETFD) & FD_CLOEXEC) ? 1 : 0);
  close(l);
  // Both ends talk through epoll only; the connection goes to RDMA meanwhile (waited
  // for after the first rounds), and the last rounds run over it.
  int ep = epoll_create1(0);
  add(ep, c, EPOLLIN | EPOLLET, 0);
  add(ep, s, EPOLLIN | EPOLLET, 1);
  long moved = 0;
  char buf[512];
  auto echo_rounds = [&](int from, int to) {
    for (int round = from; round < to; ++round) {
      size_t n = 1 + (round * 37) % sizeof buf;
      memset(buf, round & 0xff, n);
      if (send(c, buf, n, 0) != static_cast<long>(n)) return;
      size_t got = 0;
      while (got < n) {
        epoll_event ev[2];
        if (epoll_wait(ep, ev, 2, kLong) <= 0) return;
        long r;
        while ((r = recv(s, buf + got, sizeof buf - got, 0)) > 0) got += static_cast<size_t>(r);
      }
      if (got != n || buf[n - 1] != static_cast<char>(round & 0xff)) return;
      send(s, buf, 1, 0);
      bool back = false;
      while (!back) {
        epoll_event ev[2];
        if (epoll_wait(ep, ev, 2, kLong) <= 0) return;
        back = recv(c, buf, 1, 0) == 1;
      }
      moved += static_cast<long>(n);
    }
  };
  echo_rounds(0, 200);
  wait_upgraded(g_upgrades += 2);
  echo_rounds(200, 300);
  printf("  bytes echoed through epoll: %ld\n", moved);
  close(ep);
  close(c);
  close(s);
}

// Threads, each with its own epoll and connection, bouncing short bursts.
void stress() {
  puts("stress: threads with their own epoll");
  constexpr int kThreads = 4, kRounds = 1500;
  std::vector<Pair> pairs(kThreads);
  std::atomic<long> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      Pair& p = pairs[t];
      nonblock(p.c);
      nonblock(p.s);
      int ep = epoll_create1(0);
      add(ep, p.c, EPOLLIN | EPOLLET, 0);
      add(ep, p.s, EPOLLIN | EPOLLET, 1);
      char buf[2048];
      long done = 0;
      for (int r = 0; r < kRounds; ++r) {
        int n = 1 + (r * 131 + t) % 2000;
        memset(buf, (r + t) & 0xff, static_cast<size_t>(n));
        if (send(p.c, buf, static_cast<size_t>(n), 0) != n) break;
        int got = 0;
        while (got < n) {
          epoll_event ev[2];
          if (epoll_wait(ep, ev, 2, kLong) <= 0) break;
          long k;
          while ((k = recv(p.s, buf + got, sizeof buf - static_cast<size_t>(got), 0)) > 0) got += static_cast<int>(k);
        }
        if (got != n || buf[n - 1] != static_cast<char>((r + t) & 0xff)) break;
        ++done;
      }
      if (done == kRounds) ok.fetch_add(1);
      close(ep);
    });
  }
  for (auto& t : ts) t.join();
  printf("  threads that moved every burst: %ld of %d\n", ok.load(), kThreads);
}

// CPU ticks (user + system) of this process's threads named `comm`, or of all of them.
long cpu_ticks(const char* comm) {
  long total = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    char name[64] = {};
    if (FILE* f = fopen((base + "/comm").c_str(), "r")) {
      if (!fgets(name, sizeof name, f)) name[0] = 0;
      fclose(f);
    }
    name[strcspn(name, "\n")] = 0;
    if (comm && strcmp(name, comm) != 0) continue;
    if (FILE* f = fopen((base + "/stat").c_str(), "r")) {
      char buf[1024];
      if (fgets(buf, sizeof buf, f)) {
        // Fields after the parenthesized name: state is field 3, utime 14, stime 15.
        const char* p = strrchr(buf, ')');
        long utime = 0, stime = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) == 2)
          total += utime + stime;
      }
      fclose(f);
    }
  }
  closedir(d);
  return total;
}

// An upgraded connection left idle, its owner asleep in epoll_wait: the poller and the
// whole process use (almost) no CPU.
// A connected pair over loopback, which stays on kernel TCP under ferry too (no RDMA
// route): the members of an epoll set that ferry leaves to the kernel.
struct TcpPair {
  int c = -1, s = -1;
  TcpPair() {
    sockaddr_in a;
    int l = fresh_listener(&a, "127.0.0.1");
    c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) perror("connect");
    s = accept(l, nullptr, nullptr);
    close(l);
  }
  ~TcpPair() {
    if (c >= 0) close(c);
    if (s >= 0) close(s);
  }
};

// A set whose members all stay on TCP, joined for a while by an upgraded connection:
// its events come from the kernel before, from user space during, and from the kernel
// again after.
void tcp_members() {
  puts("epoll over TCP members, then an upgraded one");
  TcpPair t;
  nonblock(t.c);
  int ep = epoll_create1(0);
  add(ep, t.c, EPOLLIN | EPOLLRDHUP, 0);
  char buf[16];
  show_wait("idle", ep, 0);
  show_wait("idle 50 ms", ep, 50);
  show("peer send 3", send(t.s, "abc", 3, 0));
  show_wait("after data", ep, kLong);
  show_wait("again", ep, 0);
  show("read", read(t.c, buf, sizeof buf));
  show_wait("drained", ep, 0);
  {
    Pair p;
    add(ep, p.c, EPOLLIN, 1);
    show_wait("with the upgraded one, idle", ep, 0);
    show("its peer send 2", send(p.s, "xy", 2, 0));
    show_wait("its data", ep, kLong);
    show("read", read(p.c, buf, sizeof buf));
    show("del", epoll_ctl(ep, EPOLL_CTL_DEL, p.c, nullptr));
  }
  show_wait("TCP member alone again", ep, 0);
  show_wait("idle 50 ms", ep, 50);
  show("peer send 2", send(t.s, "de", 2, 0));
  show_wait("after data", ep, kLong);
  show("read", read(t.c, buf, sizeof buf));
  show_wait("drained 20 ms", ep, 20);
  close(t.s);
  t.s = -1;
  show_wait("peer closed", ep, kLong);
  close(ep);
}

void idle() {
  puts("idle connection for 10 s");
  Pair p;
  int ep = epoll_create1(0);
  add(ep, p.c, EPOLLIN, 0);
  sleep(3);  // the earlier scenarios' connections finish their teardown first
  const long hz = sysconf(_SC_CLK_TCK);
  long poller0 = cpu_ticks("ferry-poller"), all0 = cpu_ticks(nullptr);
  epoll_event ev;
  show_wait("10 s wait", ep, 10000);
  long poller = cpu_ticks("ferry-poller") - poller0, all = cpu_ticks(nullptr) - all0;
  fprintf(stderr, " idle-cpu: poller %ld ticks, process %ld ticks in 10 s (%ld ticks/s)", poller, all, hz);
  printf("  poller under 1%% CPU: %s\n", poller * 100 <= hz * 10 ? "yes" : "no");
  printf("  process under 1%% CPU: %s\n", all * 100 <= hz * 10 ? "yes" : "no");
  (void)ev;
  close(ep);
}

// Runs one scenario; its duration goes to stderr (a figure for the log, never compared).
void timed(const char* name, void (*scenario)()) {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  scenario();
  clock_gettime(CLOCK_MONOTONIC, &b);
  fprintf(stderr, " %s=%ldms", name, (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  g_ip = argv[1];
  g_port = 7700;
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  timed("level_triggered", level_triggered);
  timed("edge_triggered", edge_triggered);
  timed("oneshot", oneshot);
  timed("ctl_errors", ctl_errors);
  timed("several_sets_and_variants", several_sets_and_variants);
  timed("peer_shutdown_and_close", peer_shutdown_and_close);
  timed("fin_after_data", fin_after_data);
  timed("backpressure", backpressure);
  timed("poll_mixed_with_pipe", poll_mixed_with_pipe);
  timed("select_mixed", select_mixed);
  timed("nested_epoll", nested_epoll);
  timed("close_removes", close_removes);
  timed("wakeups", wakeups);
  timed("nonblocking_connect", nonblocking_connect);
  timed("stress", stress);
  timed("tcp_members", tcp_members);
  timed("idle", idle);
  printf("connections: %d\n", g_upgrades / 2);
  puts("done");
  return 0;
}
