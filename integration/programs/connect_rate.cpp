// connect_rate: connection setup rate, the way a short-lived-connection client sees it.
//   connect_rate server IP PORT          accept; read 1 byte; write it back; close; repeat
//   connect_rate client IP PORT SECONDS  connect; write 1 byte; read it back; close; repeat
// The client prints "connections/s: N" (connect + first byte round trip + close). Plain
// blocking sockets, so it runs unchanged on kernel TCP, under ferry and under rsocket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "connect_rate: %s: %s\n", what, std::strerror(errno));
  return 1;
}

sockaddr_in address(const char* ip, const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    std::fprintf(stderr, "connect_rate: bad IPv4 address %s\n", ip);
    std::exit(2);
  }
  return a;
}

int serve(const sockaddr_in& a) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return fail("bind");
  if (listen(l, 512) != 0) return fail("listen");
  for (;;) {
    int c = accept(l, nullptr, nullptr);
    if (c < 0) return fail("accept");
    char b;
    if (read(c, &b, 1) == 1) (void)!write(c, &b, 1);
    close(c);
  }
}

int client(const sockaddr_in& a, double seconds) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto end = start + std::chrono::duration<double>(seconds);
  long done = 0;
  while (clock::now() < end) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return fail("connect");
    char b = 'x';
    if (write(s, &b, 1) != 1) return fail("write");
    if (read(s, &b, 1) != 1) return fail("read (no echo)");
    close(s);
    ++done;
  }
  double took = std::chrono::duration<double>(clock::now() - start).count();
  std::printf("connections: %ld in %.3f s\nconnections/s: %.1f\n", done, took, done / took);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "server") == 0) return serve(address(argv[2], argv[3]));
  if (argc == 5 && std::strcmp(argv[1], "client") == 0)
    return client(address(argv[2], argv[3]), std::atof(argv[4]));
  std::fprintf(stderr, "usage: connect_rate server IP PORT | client IP PORT SECONDS\n");
  return 2;
}
