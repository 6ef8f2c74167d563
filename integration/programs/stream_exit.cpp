// stream_exit IP PORT HOW: a server whose process ends while one of its threads is
// still sending. It accepts one connection, reads one byte, starts a thread that sends
// exit_flush.py's block (1 MiB: byte i is (i * 2654435761) >> 13) over and over for
// ever, and 0.5 s later ends the process from the main thread, HOW: "exit" (_exit) or
// "sigterm" (SIGTERM at its default action). Kernel TCP ends the process at once, the
// peer reading whole blocks and then some, and an orderly end; so must ferry (read
// with `exit_flush.py client ... prefix`). Prints "listening" once it listens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: stream_exit IP PORT exit|sigterm\n");
    return 2;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
  int one = 1;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 || l < 0 ||
      setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) {
    std::perror("stream_exit: listener");
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  int c = accept(l, nullptr, nullptr);
  char byte;
  if (c < 0 || recv(c, &byte, 1, 0) != 1) {
    std::perror("stream_exit: accept");
    return 1;
  }
  std::vector<unsigned char> block(1 << 20);
  for (uint64_t i = 0; i < block.size(); ++i) block[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  std::thread([c, &block] {
    for (;;) {
      size_t off = 0;
      while (off < block.size()) {
        ssize_t n = send(c, block.data() + off, block.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
    }
  }).detach();
  usleep(500000);
  if (std::strcmp(argv[3], "sigterm") == 0) raise(SIGTERM);
  _exit(0);
}
