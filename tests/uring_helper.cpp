// A program that says hello on a connection with send and recv, then carries it through
// io_uring (liburing, as modern event loops do), run under libferry.so at both ends
// (core/base/uring.h): one end uses io_uring, the other plain calls.
//   uring_helper serve IP PORT uring|plain    echoes two connections, one after the other
//   uring_helper connect IP PORT uring|plain BYTES
//                                             sends BYTES (then 64 KiB on a second
//                                             connection) and checks every byte echoed
//                                             (it tries to connect for 10 s)
// With URING_STAT_CMD (`ferry stat`), each end waits until ferry counts its first
// connection upgraded before its ring comes (20 s at most) and says so. A ring's wait
// gives up after 30 s ("hung"); a byte out of place says where. Exit status 0 when all
// is well.
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "upgraded_wait.h"

namespace {

constexpr size_t kChunk = 65536;
bool g_uring = false;
io_uring g_ring;

uint8_t pattern(uint64_t i) { return static_cast<uint8_t>(i % 251 + i / 65536); }

[[noreturn]] void die(const char* what) {
  printf("failed: %s\n", what);
  fflush(stdout);
  exit(1);
}

void upgraded_first() {
  if (const long up = wait_upgraded("URING_STAT_CMD", 1); up >= 0) printf("upgraded before the ring: %ld\n", up);
}

void start_ring() {
  if (!g_uring) return;
  if (int e = io_uring_queue_init(8, &g_ring, 0)) {
    errno = -e;
    die("io_uring_queue_init");
  }
}

// One line by plain calls: send ours, read the peer's.
void hello(int fd) {
  if (send(fd, "HELLO\n", 6, 0) != 6) die("send hello");
  char c = 0;
  for (int n = 0; c != '\n'; ++n)
    if (recv(fd, &c, 1, 0) != 1 || n > 6) die("recv hello");
}

// The ring's next completion: its result and user data.
int complete(uint64_t& what) {
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec t{30, 0};
  int e = io_uring_wait_cqe_timeout(&g_ring, &cqe, &t);
  if (e == -ETIME) die("hung: no completion in 30 s");
  if (e < 0) die("io_uring_wait_cqe");
  const int res = cqe->res;
  what = cqe->user_data;
  io_uring_cqe_seen(&g_ring, cqe);
  return res;
}

void submit(bool send, int fd, void* buf, size_t n) {
  io_uring_sqe* sqe = io_uring_get_sqe(&g_ring);
  if (!sqe) die("no sqe");
  if (send)
    io_uring_prep_send(sqe, fd, buf, n, MSG_NOSIGNAL);
  else
    io_uring_prep_recv(sqe, fd, buf, n, 0);
  io_uring_sqe_set_data64(sqe, send ? 1 : 0);
  if (io_uring_submit(&g_ring) != 1) die("io_uring_submit");
}

// Echoes fd to its end.
void echo(int fd) {
  std::vector<uint8_t> buf(kChunk);
  for (;;) {
    ssize_t n;
    uint64_t what;
    if (g_uring) {
      submit(false, fd, buf.data(), buf.size());
      n = complete(what);
    } else {
      n = recv(fd, buf.data(), buf.size(), 0);
    }
    if (n < 0) die("echo: recv");
    if (n == 0) return;
    for (ssize_t at = 0; at < n;) {
      ssize_t w;
      if (g_uring) {
        submit(true, fd, buf.data() + at, static_cast<size_t>(n - at));
        w = complete(what);
      } else {
        w = send(fd, buf.data() + at, static_cast<size_t>(n - at), MSG_NOSIGNAL);
      }
      if (w <= 0) die("echo: send");
      at += w;
    }
  }
}

// Sends total bytes of the pattern, ends the sending side, and checks what comes back.
void exchange(int fd, uint64_t total) {
  std::vector<uint8_t> out(kChunk), in(kChunk);
  uint64_t sent = 0, got = 0;
  auto fill = [&](uint64_t from, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = pattern(from + i);
  };
  auto check = [&](ssize_t n) {
    for (ssize_t i = 0; i < n; ++i)
      if (in[static_cast<size_t>(i)] != pattern(got + static_cast<uint64_t>(i))) {
        printf("failed: byte %llu came back different\n", static_cast<unsigned long long>(got + i));
        exit(1);
      }
    got += static_cast<uint64_t>(n);
  };
  if (!g_uring) {
    std::thread sender([&] {
      std::vector<uint8_t> b(kChunk);
      for (uint64_t at = 0; at < total;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, total - at));
        for (size_t i = 0; i < n; ++i) b[i] = pattern(at + i);
        const ssize_t w = send(fd, b.data(), n, MSG_NOSIGNAL);
        if (w <= 0) die("send");
        at += static_cast<uint64_t>(w);
      }
      shutdown(fd, SHUT_WR);
    });
    for (;;) {
      const ssize_t n = recv(fd, in.data(), in.size(), 0);
      if (n < 0) die("recv");
      if (n == 0) break;
      check(n);
    }
    sender.join();
  } else {
    // One send and one receive in flight at a time, in one ring.
    size_t sending = static_cast<size_t>(std::min<uint64_t>(kChunk, total));
    fill(0, sending);
    if (sending) submit(true, fd, out.data(), sending);
    submit(false, fd, in.data(), in.size());
    bool receiving = true, shut = total == 0;
    if (shut) shutdown(fd, SHUT_WR);
    while (receiving || sending) {
      uint64_t what;
      const int r = complete(what);
      if (what == 1) {
        if (r <= 0) die("io_uring send");
        sent += static_cast<uint64_t>(r);
        if (static_cast<size_t>(r) < sending) memmove(out.data(), out.data() + r, sending - static_cast<size_t>(r));
        sending = static_cast<size_t>(std::min<uint64_t>(kChunk, total - sent));
        if (sending) {
          fill(sent, sending);
          submit(true, fd, out.data(), sending);
        } else if (!shut) {
          shut = true;
          shutdown(fd, SHUT_WR);
        }
      } else {
        if (r < 0) die("io_uring recv");
        if (r == 0) {
          receiving = false;
          continue;
        }
        check(r);
        submit(false, fd, in.data(), in.size());
      }
    }
  }
  if (got != total) {
    printf("failed: %llu of %llu bytes came back\n", static_cast<unsigned long long>(got),
           static_cast<unsigned long long>(total));
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string role = argv[1];
  g_uring = strcmp(argv[4], "uring") == 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(atoi(argv[3])));
  if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) return 2;
  if (role == "serve") {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 4)) die("listen");
    for (int i = 0; i < 2; ++i) {
      const int fd = accept(l, nullptr, nullptr);
      if (fd < 0) die("accept");
      hello(fd);
      if (i == 0) {
        upgraded_first();
        start_ring();
      }
      echo(fd);
      close(fd);
    }
    printf("served 2 connections\n");
    return 0;
  }
  if (role == "connect" && argc >= 6) {
    const uint64_t total = strtoull(argv[5], nullptr, 10);
    for (int i = 0; i < 2; ++i) {
      int fd = -1;
      for (int tries = 0; fd < 0 && tries < 200; ++tries) {  // the server may not listen yet
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
        close(fd);
        fd = -1;
        usleep(50000);
      }
      if (fd < 0) die("connect");
      hello(fd);
      if (i == 0) {
        upgraded_first();
        start_ring();
      }
      exchange(fd, i == 0 ? total : kChunk);
      close(fd);
    }
    printf("echoed %llu and %zu bytes intact\n", static_cast<unsigned long long>(total), kChunk);
    return 0;
  }
  return 2;
}
