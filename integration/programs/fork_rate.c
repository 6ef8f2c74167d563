// fork_rate [SECONDS [ADDRESS [PORT]]]: what a forking server's parent and child pay per
// connection, the way a PostgreSQL postmaster and backend do: a listener on ADDRESS
// (IPv4, default 127.0.0.1) and one accepted connection open, then fork; the child
// closes the listener and exits with exit() (destructors and atexit handlers run); the
// parent waits for it. Without PORT the connection is its own (it connects to its
// listener); with PORT it listens there, prints "listening" and waits for one
// connection from another program, as a server's clients are (a process under ferry
// connected to itself is both ends under ferry). Prints "forks/s: N". Plain C, so it
// runs unchanged with and without ferry.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double secs = argc > 1 ? atof(argv[1]) : 5;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (argc > 2 && inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
    fprintf(stderr, "fork_rate: not an IPv4 address: %s\n", argv[2]);
    return 2;
  }
  const int outside = argc > 3;
  if (outside) a.sin_port = htons((unsigned short)atoi(argv[3]));
  const int one = 1;
  if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(l, (struct sockaddr*)&a, sizeof a) ||
      listen(l, 16) || getsockname(l, (struct sockaddr*)&a, &al)) {
    perror("fork_rate: listener");
    return 1;
  }
  if (outside) {
    printf("listening\n");
    fflush(stdout);
  } else {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr*)&a, sizeof a)) {
      perror("fork_rate: connect");
      return 1;
    }
  }
  int s = accept(l, NULL, NULL);
  if (s < 0) {
    perror("fork_rate: accept");
    return 1;
  }
  long n = 0;
  const double start = now();
  double t = start;
  while (t - start < secs) {
    pid_t p = fork();
    if (p < 0) {
      perror("fork_rate: fork");
      return 1;
    }
    if (p == 0) {
      close(l);
      exit(0);
    }
    waitpid(p, NULL, 0);
    ++n;
    if (n % 16 == 0) t = now();
  }
  t = now();
  printf("forks/s: %.1f\n", (double)n / (t - start));
  return 0;
}
