// Fault injection: an LD_PRELOAD library loaded after ferry's
// (LD_PRELOAD=libslow_poller.so ferry PROGRAM). Each time ferry's poller thread
// (named ferry-poller) wakes from epoll_wait, it goes on SLOW_POLLER_MS milliseconds
// late (default 300): rdma_cm's events, TCP arrivals and timers are handled that much
// after they came, as on a machine whose poller does not get a CPU at once. The
// program's own threads are not slowed.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <time.h>

int epoll_wait(int epfd, struct epoll_event* ev, int max, int timeout) {
  static int (*next)(int, struct epoll_event*, int, int);
  if (!next) next = (int (*)(int, struct epoll_event*, int, int))dlsym(RTLD_NEXT, "epoll_wait");
  const int r = next(epfd, ev, max, timeout);
  const int saved = errno;
  char name[16] = {0};
  if (r > 0 && prctl(PR_GET_NAME, name) == 0 && strcmp(name, "ferry-poller") == 0) {
    const char* ms = getenv("SLOW_POLLER_MS");
    const long n = ms ? atol(ms) : 300;
    struct timespec t = {n / 1000, (n % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  errno = saved;
  return r;
}
