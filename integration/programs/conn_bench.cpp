// conn_bench: what a connection's life costs and where its first bytes go, the way
// servers with many short or fresh connections see it. Plain sockets, so it runs
// unchanged on kernel TCP and under ferry.
//   conn_bench fork-server IP PORT       a process forked per connection (accept, fork)
//   conn_bench epoll-server IP PORT      one process, one epoll loop, every connection
//   conn_bench oneway IP PORT BYTES      one fresh connection: BYTES sent at once, then
//                                        the server's 8-byte answer; prints MB/s
//   conn_bench reqresp IP PORT N BYTES   N connections one after another, each a request
//                                        of BYTES and a response of BYTES; prints
//                                        connections/s
//   conn_bench many IP PORT N BYTES IDLE N connections opened in one burst, each a
//                                        request and response of BYTES, then IDLE
//                                        seconds idle and the same again; prints the
//                                        burst's seconds as soon as it is over
// Every exchange is a 24-byte header (request bytes, response bytes, seed) and the
// request; the response follows once the whole request was read. Both are a pattern
// of the seed, checked byte for byte at the other end: any byte lost, duplicated or
// reordered fails the run (exit 1, one line on stderr).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "conn_bench: %s%s%s\n", what.c_str(), errno ? ": " : "", errno ? std::strerror(errno) : "");
  std::exit(1);
}

sockaddr_in address(const char* ip, const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    errno = 0;
    die(std::string("bad IPv4 address ") + ip);
  }
  return a;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The pattern: byte p of seed s is byte p % 8 of mix(s + p / 8).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
void fill(uint64_t seed, uint64_t off, uint8_t* buf, size_t len) {
  for (size_t i = 0; i < len;) {
    const uint64_t p = off + i, w = mix(seed + p / 8);
    const size_t in = p % 8, n = std::min<size_t>(8 - in, len - i);
    std::memcpy(buf + i, reinterpret_cast<const uint8_t*>(&w) + in, n);
    i += n;
  }
}
bool matches(uint64_t seed, uint64_t off, const uint8_t* buf, size_t len) {
  uint8_t want[4096];
  for (size_t i = 0; i < len; i += sizeof want) {
    const size_t n = std::min(sizeof want, len - i);
    fill(seed, off + i, want, n);
    if (std::memcmp(want, buf + i, n) != 0) return false;
  }
  return true;
}

struct Header {
  uint64_t request, response, seed;
};
constexpr uint64_t kMost = uint64_t{1} << 32;
uint64_t answer_seed(uint64_t seed) { return ~seed; }

// Blocking helpers: the whole buffer or failure.
bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = write(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
// Sends `n` bytes of the pattern of `seed`, in pieces of up to 64 KiB.
bool write_pattern(int fd, uint64_t seed, uint64_t n) {
  std::vector<uint8_t> buf(65536);
  for (uint64_t off = 0; off < n;) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - off));
    fill(seed, off, buf.data(), len);
    if (!write_all(fd, buf.data(), len)) return false;
    off += len;
  }
  return true;
}
// Reads `n` bytes and checks them against the pattern of `seed`.
bool read_pattern(int fd, uint64_t seed, uint64_t n, const char* what) {
  std::vector<uint8_t> buf(65536);
  for (uint64_t off = 0; off < n;) {
    const ssize_t r = read(fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), n - off)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      die(std::string(what) + ": ended after " + std::to_string(off) + " of " + std::to_string(n) + " bytes");
    }
    if (!matches(seed, off, buf.data(), static_cast<size_t>(r))) {
      errno = 0;
      die(std::string(what) + ": bytes differ near offset " + std::to_string(off));
    }
    off += static_cast<uint64_t>(r);
  }
  return true;
}

int listen_on(const char* ip, const char* port) {
  const sockaddr_in a = address(ip, port);
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (s < 0 || bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || listen(s, 4096) != 0) die("listen");
  return s;
}

int connect_to(const sockaddr_in& a) {
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) die("connect");
  const int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return c;
}

// One connection's exchanges, served with blocking calls.
void serve(int c) {
  const int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Header h;
  while (read_all(c, &h, sizeof h)) {
    if (h.request > kMost || h.response > kMost) break;
    read_pattern(c, h.seed, h.request, "server: request");
    if (!write_pattern(c, answer_seed(h.seed), h.response)) break;
  }
  close(c);
}

int fork_server(const char* ip, const char* port) {
  const int s = listen_on(ip, port);
  signal(SIGCHLD, SIG_IGN);  // children are reaped by the kernel
  for (;;) {
    const int c = accept(s, nullptr, nullptr);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      die("accept");
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(s);
      serve(c);
      _exit(0);
    }
    close(c);
  }
}

// One exchange from the client's side, blocking.
void exchange(int c, uint64_t request, uint64_t response, uint64_t seed) {
  const Header h{request, response, seed};
  if (!write_all(c, &h, sizeof h) || !write_pattern(c, seed, request)) die("client: send");
  read_pattern(c, answer_seed(seed), response, "client: response");
}

int oneway(const char* ip, const char* port, uint64_t bytes) {
  const sockaddr_in a = address(ip, port);
  const auto t0 = Clock::now();
  const int c = connect_to(a);
  exchange(c, bytes, 8, 1);
  close(c);
  std::printf("MB/s: %.1f\n", static_cast<double>(bytes) / 1e6 / seconds_since(t0));
  return 0;
}

int reqresp(const char* ip, const char* port, int n, uint64_t bytes) {
  const sockaddr_in a = address(ip, port);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    const int c = connect_to(a);
    exchange(c, bytes, bytes, static_cast<uint64_t>(i) + 1);
    close(c);
  }
  const double secs = seconds_since(t0);
  std::printf("connections/s: %.1f\nMB/s: %.1f\n", n / secs, 2.0 * static_cast<double>(bytes) * n / 1e6 / secs);
  return 0;
}

// A non-blocking exchange's progress on one connection, either end.
struct Peer {
  int fd = -1;
  Header h{};
  uint64_t at = 0;  // bytes of the header and request done
  uint64_t back = 0;  // bytes of the response done
  bool done = false;
};

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Moves as many bytes as the socket takes or gives now: the header and the request
// (the client writes them, the server reads them), then the response (the other way).
// True when the exchange finished (for the server also when the client closed between
// two: `done`); exits on a broken one.
bool step(Peer& p, bool server) {
  uint8_t buf[65536];
  constexpr uint64_t head = sizeof(Header);
  for (;;) {
    const bool response = p.at >= head + p.h.request;
    if (response && p.back >= p.h.response) return true;
    const bool writing = server == response;
    if (writing) {
      ssize_t w;
      if (p.at < head) {
        w = write(p.fd, reinterpret_cast<const uint8_t*>(&p.h) + p.at, head - p.at);
      } else {
        const uint64_t total = response ? p.h.response : p.h.request, off = response ? p.back : p.at - head;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof buf, total - off));
        fill(response ? answer_seed(p.h.seed) : p.h.seed, off, buf, n);
        w = write(p.fd, buf, n);
      }
      if (w < 0 && errno == EAGAIN) return false;
      if (w <= 0) die(server ? "server: send" : "client: send");
      (response ? p.back : p.at) += static_cast<uint64_t>(w);
      continue;
    }
    const uint64_t want = p.at < head ? head - p.at : response ? p.h.response - p.back : head + p.h.request - p.at;
    const ssize_t r = read(p.fd, buf, static_cast<size_t>(std::min<uint64_t>(sizeof buf, want)));
    if (r < 0 && errno == EAGAIN) return false;
    if (r == 0 && server && p.at == 0) return p.done = true;  // the client closed between exchanges
    if (r <= 0) {
      if (r == 0) errno = 0;
      die(server ? "server: the request ended early" : "client: the response ended early");
    }
    if (p.at < head) {
      std::memcpy(reinterpret_cast<uint8_t*>(&p.h) + p.at, buf, static_cast<size_t>(r));
      p.at += static_cast<uint64_t>(r);
      if (p.at == head && (p.h.request > kMost || p.h.response > kMost)) {
        errno = 0;
        die("server: a header out of range");
      }
      continue;
    }
    const uint64_t off = response ? p.back : p.at - head;
    if (!matches(response ? answer_seed(p.h.seed) : p.h.seed, off, buf, static_cast<size_t>(r))) {
      errno = 0;
      die(server ? "server: request bytes differ" : "client: response bytes differ");
    }
    (response ? p.back : p.at) += static_cast<uint64_t>(r);
  }
}

int epoll_server(const char* ip, const char* port) {
  const int s = listen_on(ip, port);
  set_nonblocking(s);
  const int ep = epoll_create1(0);
  epoll_event ev{EPOLLIN, {.ptr = nullptr}};
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  epoll_event events[256];
  for (;;) {
    const int n = epoll_wait(ep, events, 256, -1);
    for (int i = 0; i < n; ++i) {
      auto* p = static_cast<Peer*>(events[i].data.ptr);
      if (p == nullptr) {
        for (int c; (c = accept4(s, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
          const int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto* q = new Peer;
          q->fd = c;
          epoll_event cev{EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, {.ptr = q}};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      while (step(*p, true) && !p->done) *p = Peer{p->fd};  // the next exchange
      if (p->done) {
        close(p->fd);
        delete p;
      }
    }
  }
}

int many(const char* ip, const char* port, int n, uint64_t bytes, int idle) {
  const sockaddr_in a = address(ip, port);
  const int ep = epoll_create1(0);
  std::vector<Peer> peers(static_cast<size_t>(n));
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    Peer& p = peers[static_cast<size_t>(i)];
    p.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (p.fd < 0) die("socket (" + std::to_string(i) + " open)");
    const int one = 1;
    setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(p.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) die("connect");
    epoll_event ev{EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, {.ptr = &p}};
    epoll_ctl(ep, EPOLL_CTL_ADD, p.fd, &ev);
  }
  double took[2] = {};
  std::vector<epoll_event> events(1024);
  for (int round = 0; round < 2; ++round) {
    const auto start = round == 0 ? t0 : Clock::now();
    int left = n;
    for (int i = 0; i < n; ++i) {
      Peer& p = peers[static_cast<size_t>(i)];
      p = Peer{p.fd, Header{bytes, bytes, static_cast<uint64_t>(round) * static_cast<uint64_t>(n) + i + 1}};
      if (round == 1 && step(p, false)) p.done = true, --left;
    }
    while (left > 0) {
      const int got = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 60000);
      if (got == 0) {
        errno = 0;
        die("no progress for 60 s, " + std::to_string(left) + " exchanges unfinished");
      }
      for (int i = 0; i < got; ++i) {
        Peer& p = *static_cast<Peer*>(events[i].data.ptr);
        if (events[i].events & (EPOLLERR | EPOLLHUP) && !p.done) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          errno = err;
          die("connection " + std::to_string(&p - peers.data()));
        }
        if (!p.done && step(p, false)) p.done = true, --left;
      }
    }
    took[round] = seconds_since(start);
    if (round == 0) {
      // Said at once: while the connections idle, a watcher reads both ends' counters.
      std::printf("burst s: %.2f\n", took[0]);
      std::fflush(stdout);
      if (idle > 0) sleep(static_cast<unsigned>(idle));
    }
  }
  for (Peer& p : peers) close(p.fd);
  std::printf("after idle s: %.2f\nintact: %d of %d\n", took[1], n, n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fork-server" && argc == 4) return fork_server(argv[2], argv[3]);
  if (mode == "epoll-server" && argc == 4) return epoll_server(argv[2], argv[3]);
  if (mode == "oneway" && argc == 5) return oneway(argv[2], argv[3], std::strtoull(argv[4], nullptr, 0));
  if (mode == "reqresp" && argc == 6) return reqresp(argv[2], argv[3], std::atoi(argv[4]), std::strtoull(argv[5], nullptr, 0));
  if (mode == "many" && argc == 7)
    return many(argv[2], argv[3], std::atoi(argv[4]), std::strtoull(argv[5], nullptr, 0), std::atoi(argv[6]));
  std::fprintf(stderr,
               "usage: conn_bench fork-server|epoll-server IP PORT | oneway IP PORT BYTES |\n"
               "       reqresp IP PORT N BYTES | many IP PORT N BYTES IDLE_SECONDS\n");
  return 2;
}
