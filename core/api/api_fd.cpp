#include "core/api/api.h"

#include "core/api/epoll_set.h"
#include "core/api/stream.h"
#include "core/base/own_fd.h"
#include "core/base/sandbox.h"
#include "core/conn/fdtable.h"
#include "core/conn/handoff.h"
#include "core/conn/upgrade.h"

#include <fcntl.h>
#include <dirent.h>
#include <linux/close_range.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#include <vector>

namespace ferry::api {
namespace {

template <class T>
void alias_in(FdMap<T>& map, int from, int fd) noexcept {
  if (auto obj = map.get(from)) {
    const bool marked = map.marked(from);
    const T* raw = obj.get();
    map.set(fd, std::move(obj));
    if (marked) map.mark(fd, raw);
  } else {
    map.take(fd);
  }
}

// fd now refers to what `from` refers to (dup family).
void alias(int from, long fd) noexcept {
  if (fd < 0) return;
  alias_in(fd_table(), from, static_cast<int>(fd));
  alias_in(epoll_sets(), from, static_cast<int>(fd));
}

// ferry's own descriptors do not exist as far as the program is concerned.
bool ours(int fd) noexcept { return own::owns(fd); }

// fd, a descriptor of s (which has a link), is about to stop referring to it; `last`:
// the last one. A connection a forked child may hold goes to TCP first.
void closing(int fd, Socket& s, bool last = false) noexcept {
  handoff::closing(fd, s);
  upgrade::closing(fd, s, last);
}

// fd is about to stop referring to its socket (close, or dup2/dup3 over it).
void closing(int fd) noexcept {
  if (SocketRef s = fd_table().get(fd); s && s->link) closing(fd, *s);
}

}  // namespace

long close(int fd) noexcept {
  if (ours(fd)) return -EBADF;
  // Untrack first: once the kernel frees the number another thread may reuse it.
  SocketRef s = fd_table().take(fd);
  if (sandbox::on() && s) {
    // Under the program's system-call filter (core/base/sandbox.h) nothing of ferry's is
    // undone (its connections went back to TCP before the filter): the socket is kept.
    new SocketRef(std::move(s));
  }
  // No other descriptor of the table shares the socket (a count another thread holds
  // for a moment only makes the close an orderly one).
  if (s && s->link) closing(fd, *s, s.use_count() == 1);
  if (epoll_sets().tracked(fd)) epoll_sets().take(fd);
  const long r = sys(real.close(fd));
  keep_inherited(s);  // a forked child's inherited socket: nothing to free
  return r;
}

long dup(int fd) noexcept {
  if (ours(fd)) return -EBADF;
  long r = sys(real.dup(fd));
  alias(fd, r);
  return r;
}

long dup2(int fd, int newfd) noexcept {
  if (ours(fd)) return -EBADF;
  // The program gets the number it asked for; ferry's descriptor moves elsewhere.
  if (ours(newfd) && !own::make_way(newfd)) return -EMFILE;
  if (fd != newfd) closing(newfd);
  long r = sys(real.dup2(fd, newfd));
  if (r >= 0 && fd != newfd) alias(fd, r);
  return r;
}

long dup3(int fd, int newfd, int flags) noexcept {
  if (ours(fd)) return -EBADF;
  if (ours(newfd) && fd != newfd && !own::make_way(newfd)) return -EMFILE;
  if (fd != newfd) closing(newfd);
  long r = sys(real.dup3(fd, newfd, flags));
  alias(fd, r);
  return r;
}

long close_range(unsigned first, unsigned last, int flags) noexcept {
  bool closes = !(flags & CLOSE_RANGE_CLOEXEC);
  if (closes && first <= last) {
    fd_table().for_each([&](int fd, const SocketRef& s) {
      if (static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last && s->link)
        closing(fd, *s);
    });
    fd_table().take_range(first, last);
    epoll_sets().take_range(first, last);
  }
  if (first > last) return sys(real.close_range(first, last, flags));
  // Closes around ferry's own descriptors.
  long r = 0;
  own::around(first, last, [&](unsigned lo, unsigned hi) {
    long k = sys(real.close_range(lo, hi, flags));
    if (r == 0) r = k;
  });
  return r;
}

void closefrom(int lowfd) noexcept {
  if (lowfd < 0) lowfd = 0;
  if (close_range(static_cast<unsigned>(lowfd), ~0U, 0) != -ENOSYS) return;
  // A kernel without close_range: every open descriptor from lowfd, one by one.
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  int self = dirfd(d);
  std::vector<int> fds;
  while (dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd >= lowfd && fd != self) fds.push_back(fd);
  }
  closedir(d);
  for (int fd : fds) close(fd);
}

FERRY_IO_PATH long fcntl(int fd, int cmd, void* arg) noexcept {
  if (ours(fd)) return -EBADF;
  long r = sys(real.fcntl(fd, cmd, arg));
  if (r < 0) return r;
  switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      alias(fd, r);
      break;
    case F_SETFL:  // what a socket on kernel TCP for good needs no more: the kernel's flag
      if (fd_table().marked(fd)) break;
      if (SocketRef s = fd_table().get(fd))
        s->nonblocking.store((static_cast<int>(reinterpret_cast<intptr_t>(arg)) & O_NONBLOCK) != 0);
      break;
    default:
      break;
  }
  return r;
}

FERRY_IO_PATH long ioctl(int fd, unsigned long request, void* arg) noexcept {
  if ((request == FIONREAD || request == SIOCOUTQ || request == SIOCOUTQNSD) && arg) {
    if (SocketRef s = fd_table().get(fd); s && handoff::carried(*s)) {
      long n = request == FIONREAD ? stream::readable(fd, *s) : stream::unsent(fd, *s);
      if (n < 0) return n;
      *static_cast<int*>(arg) = static_cast<int>(n);
      return 0;
    }
  }
  long r = sys(real.ioctl(fd, request, arg));
  if (r == 0 && request == FIONBIO && arg && !fd_table().marked(fd)) {
    if (SocketRef s = fd_table().get(fd)) s->nonblocking.store(*static_cast<int*>(arg) != 0);
  }
  return r;
}

}  // namespace ferry::api
