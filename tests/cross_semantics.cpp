// Socket semantics with the two ends of each connection on different hosts: the same
// binary runs on both (one serves, one connects), each end of every scenario in its own
// process, so every byte, FIN and reset crosses a real wire. Each side prints one line
// per observable result of its own end; run plainly and under ferry on both hosts, each
// side's outputs must be identical. The two sides keep in step over a control
// connection (one byte each way per step), so no result depends on timing. Under ferry
// every scenario first waits until its connection is on RDMA at this end
// (SEMANTICS_STAT_CMD names `ferry stat`).
//   cross_semantics serve OWN_IP | connect PEER_IP
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "semantics_pair.h"

namespace {

using namespace semantics;

bool g_serve;  // this side accepts; the other connects
int g_control = -1;

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "cross_semantics: %s: %s\n", what, strerror(errno));
  exit(3);
}

bool send_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    long r = send(fd, b, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One step of the two sides: each tells the other it got here, then waits for it.
void step() {
  char b = 's';
  if (send(g_control, &b, 1, MSG_NOSIGNAL) != 1 || recv(g_control, &b, 1, MSG_WAITALL) != 1) die("control");
}
// A number for the other side (tell) and from it (hear), over the control connection.
void tell(uint64_t v) {
  if (!send_all(g_control, &v, sizeof v)) die("control");
}
uint64_t hear() {
  uint64_t v = 0;
  if (recv(g_control, &v, sizeof v, MSG_WAITALL) != sizeof v) die("control");
  return v;
}

// A socket connected to the other host's next fresh port, retrying while nobody listens
// there yet (only the control connection needs that; the others connect after a step).
int dial(int port, int patience_s) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, g_ip, &a.sin_addr);
  for (int i = 0; i <= patience_s * 10; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    int err = errno;
    close(fd);
    if (err != ECONNREFUSED) break;
    usleep(100000);
  }
  die("connect");
}

// The first data calls of each end: one byte each way (the upgrade commits there), then
// wait until this end is on RDMA. Whether it is (always, when not under ferry).
bool greet(int fd) {
  char b = 'h';
  if (g_serve) {
    recv(fd, &b, 1, 0);
    send(fd, &b, 1, 0);
  } else {
    send(fd, &b, 1, 0);
    recv(fd, &b, 1, 0);
  }
  const bool up = wait_upgraded(g_upgrades + 1);
  // Counted from what the counters say: a connection left on TCP does not make every
  // later wait miss by one.
  const long now = upgraded_now();
  g_upgrades = now >= 0 ? static_cast<int>(now) : g_upgrades + 1;
  return up;
}

// This side's end of a fresh connection, on RDMA under ferry; both sides at the same
// step. A connection that stayed on TCP (its upgrade request came before the other
// host's rdma_cm listener was up, say) is closed and made again, up to three times.
struct End {
  int fd = -1;
  End() {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (fd >= 0) close(fd);
      if (g_serve) {
        sockaddr_in a;
        int l = fresh_listener(&a);
        step();
        fd = accept(l, nullptr, nullptr);
        close(l);
      } else {
        ++g_port;
        step();
        fd = dial(g_port, 0);
      }
      if (fd < 0) die("accept");
      const uint64_t mine = greet(fd);
      tell(mine);
      const uint64_t theirs = hear();
      if (mine && theirs) break;
    }
    step();
  }
  ~End() {
    if (fd >= 0) close(fd);
  }
};

uint8_t byte_at(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = byte_at(i);
  return v;
}

// Reads until EOF, an error or `limit` bytes; how many matched pattern() from `from` on
// (all of them if the stream is intact); prints the count unless it is not the same on
// every transport (`count` false).
size_t read_checked(int fd, size_t limit, bool count = true) {
  std::vector<uint8_t> buf(64 * 1024);
  size_t got = 0, good = 0;
  while (got < limit) {
    long r = recv(fd, buf.data(), std::min(buf.size(), limit - got), 0);
    if (r <= 0) break;
    for (long i = 0; i < r; ++i) good += buf[static_cast<size_t>(i)] == byte_at(got + static_cast<size_t>(i));
    got += static_cast<size_t>(r);
  }
  if (count) printf("  read %zu bytes\n", got);
  printf("  %s\n", good == got ? "intact" : "CORRUPT");
  return got;
}

// epoll_wait for one event; prints the result and the event's bits.
void show_wait(const char* what, int ep, int timeout_ms) {
  epoll_event e{};
  int n = epoll_wait(ep, &e, 1, timeout_ms);
  uint32_t ev = e.events;
  printf("  %s: %d", what, n);
  const std::pair<uint32_t, const char*> names[] = {{EPOLLIN, "IN"}, {EPOLLOUT, "OUT"}, {EPOLLRDHUP, "RDHUP"},
                                                    {EPOLLERR, "ERR"}, {EPOLLHUP, "HUP"}};
  for (auto& [bit, name] : names) {
    if (n > 0 && (ev & bit)) printf(" %s", name);
  }
  putchar('\n');
}

void peek_and_waitall() {
  puts("MSG_PEEK|MSG_WAITALL and MSG_WAITALL across pieces");
  End e;
  char buf[64] = {};
  if (g_serve) {
    show("recv 4 MSG_PEEK|MSG_WAITALL", recv(e.fd, buf, 4, MSG_PEEK | MSG_WAITALL));
    printf("  peeked %.4s\n", buf);
    show("recv 6 MSG_WAITALL", recv(e.fd, buf, 6, MSG_WAITALL));
    printf("  read %.6s\n", buf);
    show("recv 50 MSG_WAITALL", recv(e.fd, buf, 50, MSG_WAITALL));
    printf("  read %.50s\n", buf);
  } else {
    show("send 3", send(e.fd, "abc", 3, 0));
    usleep(50000);
    show("send 3", send(e.fd, "def", 3, 0));
    for (int i = 0; i < 5; ++i) {
      usleep(20000);
      send(e.fd, "0123456789", 10, 0);
    }
  }
  step();
}

void receive_timeout() {
  puts("SO_RCVTIMEO, then bytes that come later");
  End e;
  char buf[8] = {};
  if (g_serve) {
    timeval tv{0, 200000};
    show("setsockopt SO_RCVTIMEO", setsockopt(e.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
    show("recv with nothing to read", recv(e.fd, buf, sizeof buf, 0));
    step();
    tv = {10, 0};
    setsockopt(e.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    show("recv 3 MSG_WAITALL", recv(e.fd, buf, 3, MSG_WAITALL));
  } else {
    step();
    usleep(100000);
    show("send 3", send(e.fd, "xyz", 3, 0));
  }
  step();
}

void shutdown_write() {
  puts("shutdown(SHUT_WR) each way: data, then EOF");
  End e;
  char buf[16] = {};
  if (g_serve) {
    show("recv 5 MSG_WAITALL", recv(e.fd, buf, 5, MSG_WAITALL));
    show("recv at EOF", recv(e.fd, buf, sizeof buf, 0));
    show("recv at EOF again", recv(e.fd, buf, sizeof buf, 0));
    show("send 3 after the peer's FIN", send(e.fd, "bye", 3, 0));
    show("shutdown SHUT_WR", shutdown(e.fd, SHUT_WR));
  } else {
    show("send 5", send(e.fd, "hello", 5, 0));
    show("shutdown SHUT_WR", shutdown(e.fd, SHUT_WR));
    show("send after SHUT_WR", send(e.fd, "x", 1, MSG_NOSIGNAL));
    show("recv 3 MSG_WAITALL", recv(e.fd, buf, 3, MSG_WAITALL));
    printf("  read %.3s\n", buf);
    show("recv at EOF", recv(e.fd, buf, sizeof buf, 0));
  }
  step();
}

void linger_zero() {
  puts("SO_LINGER {1, 0} then close: the peer sees a reset");
  End e;
  char buf[8];
  if (g_serve) {
    linger lg{1, 0};
    show("setsockopt SO_LINGER", setsockopt(e.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
    show("close", close(e.fd));
    e.fd = -1;
  } else {
    show("recv", recv(e.fd, buf, sizeof buf, 0));
    show("recv again", recv(e.fd, buf, sizeof buf, 0));
    show("send", send(e.fd, "x", 1, MSG_NOSIGNAL));
  }
  step();
}

void close_with_unread() {
  puts("close with unread bytes: the peer sees a reset");
  End e;
  char buf[8];
  if (g_serve) {
    pollfd p{e.fd, POLLIN, 0};
    show("poll POLLIN", poll(&p, 1, 10000));
    usleep(100000);
    show("close with 10 bytes unread", close(e.fd));
    e.fd = -1;
  } else {
    show("send 10", send(e.fd, "0123456789", 10, 0));
    show("recv", recv(e.fd, buf, sizeof buf, 0));
  }
  step();
}

void send_after_peer_closed() {
  puts("send after the peer closed: taken, then EPIPE");
  End e;
  char buf[8];
  if (g_serve) {
    show("close", close(e.fd));
    e.fd = -1;
  } else {
    show("recv at EOF", recv(e.fd, buf, sizeof buf, 0));
    show("send 1", send(e.fd, "x", 1, MSG_NOSIGNAL));
    usleep(500000);  // the peer's reset comes back
    show("send 1 after the reset", send(e.fd, "x", 1, MSG_NOSIGNAL));
    show("recv", recv(e.fd, buf, sizeof buf, 0));
  }
  step();
}

// The asyncio pattern: write everything, only then read the echo.
void write_everything_then_echo(size_t n) {
  printf("write %zu bytes, then read their echo\n", n);
  End e;
  timeval tv{60, 0};  // a stall shows as a result, not a hang
  setsockopt(e.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(e.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (g_serve) {
    std::vector<uint8_t> buf(64 * 1024);
    size_t echoed = 0;
    for (;;) {
      long r = recv(e.fd, buf.data(), buf.size(), 0);
      if (r <= 0 || !send_all(e.fd, buf.data(), static_cast<size_t>(r))) break;
      echoed += static_cast<size_t>(r);
    }
    printf("  echoed %zu bytes\n", echoed);
    shutdown(e.fd, SHUT_WR);
  } else {
    auto out = pattern(n);
    printf("  sent all: %s\n", send_all(e.fd, out.data(), n) ? "yes" : "no");
    shutdown(e.fd, SHUT_WR);
    read_checked(e.fd, SIZE_MAX);
  }
  step();
}

void blocking_send_waits_for_reader() {
  puts("a blocking send of 8 MiB while the peer reads late");
  End e;
  const size_t n = 8u << 20;
  if (g_serve) {
    usleep(500000);
    read_checked(e.fd, n);
  } else {
    auto out = pattern(n);
    show("send 8 MiB", send(e.fd, out.data(), n, 0));
  }
  step();
}

void backpressure() {
  puts("non-blocking sends until EAGAIN, then POLLOUT as the peer drains");
  End e;
  if (g_serve) {
    size_t n = hear();
    printf("  read all sent: %s\n", read_checked(e.fd, n, false) == n ? "yes" : "no");
  } else {
    fcntl(e.fd, F_SETFL, fcntl(e.fd, F_GETFL) | O_NONBLOCK);
    // Fill until the connection holds no more: EAGAIN, and no room within 200 ms.
    auto out = pattern(64u << 20);
    size_t sent = 0;
    bool full = false;
    pollfd p{e.fd, POLLOUT, 0};
    while (!full && sent + 65536 <= out.size()) {
      long r = send(e.fd, out.data() + sent, 65536, 0);
      if (r > 0) {
        sent += static_cast<size_t>(r);
      } else if (r < 0 && errno == EAGAIN) {
        full = poll(&p, 1, 200) == 0;
      } else {
        break;
      }
    }
    printf("  filled up: %s\n", full ? "yes" : "no");
    tell(sent);
    show("poll POLLOUT while the peer drains", poll(&p, 1, 20000));
    printf("  revents %s\n", p.revents == POLLOUT ? "POLLOUT" : "other");
  }
  step();
}

void epoll_events() {
  puts("epoll: bytes, then the peer's FIN");
  End e;
  char buf[16];
  if (g_serve) {
    int ep = epoll_create1(0);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    epoll_ctl(ep, EPOLL_CTL_ADD, e.fd, &ev);
    show_wait("epoll_wait before anything", ep, 0);
    step();
    show_wait("epoll_wait for bytes", ep, 10000);
    usleep(100000);
    int n = -1;
    ioctl(e.fd, FIONREAD, &n);
    printf("  FIONREAD %d\n", n);
    show("recv", recv(e.fd, buf, sizeof buf, 0));
    step();
    show_wait("epoll_wait for the FIN", ep, 10000);
    show("recv", recv(e.fd, buf, sizeof buf, 0));
    ev.events = EPOLLOUT | EPOLLRDHUP;
    epoll_ctl(ep, EPOLL_CTL_MOD, e.fd, &ev);
    show_wait("epoll_wait EPOLLOUT after the FIN", ep, 0);
    step();
    close(ep);
  } else {
    step();
    usleep(100000);
    show("send 7", send(e.fd, "1234567", 7, 0));
    step();
    usleep(100000);
    show("shutdown SHUT_WR", shutdown(e.fd, SHUT_WR));
    step();
  }
  step();
}

void shutdown_wakes_local_reader() {
  puts("shutdown(SHUT_RDWR) wakes this end's blocked reader; the peer sees EOF");
  End e;
  char buf[8];
  if (g_serve) {
    long r = -2;
    std::thread t([&] { r = recv(e.fd, buf, sizeof buf, 0); });
    usleep(300000);
    show("shutdown SHUT_RDWR", shutdown(e.fd, SHUT_RDWR));
    t.join();
    show("blocked recv", r);
  } else {
    show("recv", recv(e.fd, buf, sizeof buf, 0));
  }
  step();
}

void two_readers() {
  puts("two threads receive 4 MiB from one connection");
  End e;
  const size_t n = 4u << 20;
  if (g_serve) {
    size_t got[2] = {};
    auto reader = [&](int i) {
      char buf[4096];
      long r;
      while ((r = recv(e.fd, buf, sizeof buf, 0)) > 0) got[i] += static_cast<size_t>(r);
    };
    std::thread a(reader, 0), b(reader, 1);
    a.join();
    b.join();
    printf("  together %zu bytes\n", got[0] + got[1]);
  } else {
    auto out = pattern(n);
    show("send_all", send_all(e.fd, out.data(), n) ? static_cast<long>(n) : -1);
    shutdown(e.fd, SHUT_WR);
  }
  step();
}

void sendfile_across() {
  puts("sendfile of 2 MiB");
  End e;
  const size_t n = 2u << 20;
  if (g_serve) {
    read_checked(e.fd, SIZE_MAX);
  } else {
    char path[] = "/tmp/cross_semantics.XXXXXX";
    int f = mkstemp(path);
    unlink(path);
    auto data = pattern(n);
    if (write(f, data.data(), n) != static_cast<long>(n)) die("write");
    off_t off = 0;
    size_t sent = 0;
    long r;
    while (sent < n && (r = sendfile(e.fd, f, &off, n - sent)) > 0) sent += static_cast<size_t>(r);
    printf("  sendfile moved %zu, offset %ld\n", sent, static_cast<long>(off));
    close(f);
    shutdown(e.fd, SHUT_WR);
  }
  step();
}

void connects() {
  puts("non-blocking connect across hosts; connect to a closed port");
  if (g_serve) {
    sockaddr_in a;
    int l = fresh_listener(&a);
    ++g_port;  // the closed port
    step();
    int fd = accept(l, nullptr, nullptr);
    close(l);
    char buf[8] = {};
    show("recv 4 MSG_WAITALL", recv(fd, buf, 4, MSG_WAITALL));
    printf("  read %.4s\n", buf);
    close(fd);
  } else {
    int port = ++g_port;
    int closed = ++g_port;
    step();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, g_ip, &a.sin_addr);
    show("connect", connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
    pollfd p{fd, POLLOUT, 0};
    show("poll POLLOUT", poll(&p, 1, 10000));
    int err = -1;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    printf("  SO_ERROR %d\n", err);
    show("send 4", send(fd, "ping", 4, 0));
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(static_cast<uint16_t>(closed));
    show("connect to a closed port", connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
    close(fd);
  }
  step();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "serve") && strcmp(argv[1], "connect"))) {
    fprintf(stderr, "usage: cross_semantics serve OWN_IP | connect PEER_IP\n");
    return 2;
  }
  g_serve = !strcmp(argv[1], "serve");
  g_ip = argv[2];
  g_port = 7300;
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  time_t start = time(nullptr);
  if (g_serve) {
    sockaddr_in a;
    int l = fresh_listener(&a);
    puts("listening");
    g_control = accept(l, nullptr, nullptr);
    close(l);
  } else {
    puts("listening");  // (the serving side's line; both outputs have it)
    g_control = dial(++g_port, 120);
  }
  if (g_control < 0) die("control");
  int one = 1;
  setsockopt(g_control, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  greet(g_control);
  // CROSS_ONLY=NAME runs one scenario (on both sides, for debugging).
  const char* only = getenv("CROSS_ONLY");
  auto run = [only](const char* name, auto f) {
    if (!only || !strcmp(only, name)) f();
  };
  run("peek", peek_and_waitall);
  run("rcvtimeo", receive_timeout);
  run("shutdown", shutdown_write);
  run("linger", linger_zero);
  run("unread", close_with_unread);
  run("epipe", send_after_peer_closed);
  // (Across hosts kernel TCP holds about 600 KB of it before the writer stalls; ferry's
  // larger capacity is thread_semantics' business, on one host.)
  run("echo", [] { write_everything_then_echo(256u << 10); });
  run("blocking_send", blocking_send_waits_for_reader);
  run("backpressure", backpressure);
  run("epoll", epoll_events);
  run("shutdown_wakes", shutdown_wakes_local_reader);
  run("two_readers", two_readers);
  run("sendfile", sendfile_across);
  run("connect", connects);
  step();
  puts("done");
  fprintf(stderr, "%ld s\n", static_cast<long>(time(nullptr) - start));
  return 0;
}
