// Fault injection: an LD_PRELOAD library loaded after ferry's
// (LD_PRELOAD=libslow_peek.so ferry PROGRAM), so it sees the calls ferry makes to libc.
// A non-blocking peek at a socket (recv or recvmsg with MSG_PEEK | MSG_DONTWAIT) that
// finds nothing returns SLOW_PEEK_MS milliseconds late (default 20): whatever arrives
// next on that socket arrives between the look that found nothing and the call that
// follows it, a race window a busy machine opens only now and then.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

static void late(ssize_t r, int flags) {
  if (r >= 0 || errno != EAGAIN || (flags & (MSG_PEEK | MSG_DONTWAIT)) != (MSG_PEEK | MSG_DONTWAIT)) return;
  const char* ms = getenv("SLOW_PEEK_MS");
  const long n = ms ? atol(ms) : 20;
  struct timespec t = {n / 1000, (n % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
  errno = EAGAIN;
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  static ssize_t (*next)(int, void*, size_t, int);
  if (!next) next = (ssize_t(*)(int, void*, size_t, int))dlsym(RTLD_NEXT, "recv");
  const ssize_t r = next(fd, buf, len, flags);
  late(r, flags);
  return r;
}

ssize_t recvmsg(int fd, struct msghdr* m, int flags) {
  static ssize_t (*next)(int, struct msghdr*, int);
  if (!next) next = (ssize_t(*)(int, struct msghdr*, int))dlsym(RTLD_NEXT, "recvmsg");
  const ssize_t r = next(fd, m, flags);
  late(r, flags);
  return r;
}
