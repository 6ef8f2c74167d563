// line_client IP PORT: connects, sends "HELLO\n", reads to the server's end and prints
// "got N bytes, the last line LINE". Small enough to run set-user-ID root (vm.attacks, setuid), where
// the loader takes ferry from /etc/ld.so.preload and the caller chose the environment.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fputs("usage: line_client IP PORT\n", stderr);
    return 2;
  }
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) return 2;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0 || send(fd, "HELLO\n", 6, 0) != 6) {
    perror("line_client");
    return 1;
  }
  char buf[4096];
  size_t got = 0;
  for (ssize_t n; got < sizeof buf - 1 && (n = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0;) got += (size_t)n;
  buf[got] = 0;
  const char* last = buf;
  for (const char* p = buf; *p; ++p)
    if (*p == '\n' && p[1]) last = p + 1;
  printf("got %zu bytes, the last line %s", got, got ? last : "none\n");
  return 0;
}
