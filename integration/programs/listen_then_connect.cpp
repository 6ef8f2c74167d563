// listen_then_connect: a server that opens a listener on a fresh port and tells its
// client the port at once, the way qperf, FTP's passive mode and test harnesses do.
//   listen_then_connect IP ROUNDS
// Each round forks a server process: it connects to the parent (a control connection,
// as qperf's), listens on IP port 0, writes the port on the control connection and
// echoes one connection's bytes until it closes. The parent connects as soon as it
// reads the port and makes 1-byte round trips: with LTC_GO set (a path), until the
// file PATH.ROUND exists (the test makes it once ferry's counters show this process's
// two ends of the round upgraded; 120 s at most, a limit for hangs), otherwise for
// 300 ms. Exits 0 when every byte came back; ferry's counters say which connections
// left kernel TCP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "listen_then_connect: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

sockaddr_in address(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    std::fprintf(stderr, "listen_then_connect: bad IPv4 address %s\n", ip);
    std::exit(2);
  }
  return a;
}

[[noreturn]] void serve(const char* ip, uint16_t control) {
  int tell = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to = address(ip, control);
  if (tell < 0 || connect(tell, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) die("connect control");
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = address(ip, 0);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) die("listen");
  socklen_t len = sizeof a;
  if (getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) die("getsockname");
  uint16_t port = ntohs(a.sin_port);
  if (write(tell, &port, sizeof port) != sizeof port) die("write port");
  int c = accept(l, nullptr, nullptr);
  if (c < 0) die("accept");
  char b;
  ssize_t n;
  while ((n = read(c, &b, 1)) == 1)
    if (write(c, &b, 1) != 1) die("echo");
  if (n != 0) die("read");
  close(c);
  close(l);
  while ((n = read(tell, &b, 1)) > 0) {
  }
  close(tell);
  std::exit(0);
}

bool round_trip(const char* ip, int heard, int round) {
  const char byte = static_cast<char>('a' + round % 26);
  const char* go = std::getenv("LTC_GO");
  const std::string until = go ? std::string(go) + "." + std::to_string(round) : std::string();
  uint16_t port;
  if (read(heard, &port, sizeof port) != sizeof port) die("read port");
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = address(ip, port);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  bool same = true;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(go ? 120000 : 300);
  do {
    char back = 0;
    if (write(s, &byte, 1) != 1 || read(s, &back, 1) != 1) die("round trip");
    same = same && back == byte;
  } while (std::chrono::steady_clock::now() < end && (!go || access(until.c_str(), F_OK) != 0));
  close(s);
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: listen_then_connect IP ROUNDS\n");
    return 2;
  }
  const int rounds = std::atoi(argv[2]);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = address(argv[1], 0);
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 8) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    die("control listener");
  int wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
      close(l);
      serve(argv[1], ntohs(a.sin_port));
    }
    int control = accept(l, nullptr, nullptr);
    if (control < 0) die("accept control");
    if (!round_trip(argv[1], control, i)) ++wrong;
    close(control);
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++wrong;
  }
  std::printf("rounds %d wrong %d\n", rounds, wrong);
  return wrong == 0 ? 0 : 1;
}
