#include "core/api.h"

#include "core/epoll_set.h"
#include "core/fdtable.h"
#include "core/log.h"
#include "core/stream.h"
#include "core/upgrade.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

namespace ferry::api {
namespace {

template <class T>
void alias_in(FdMap<T>& map, int from, int fd) noexcept {
  if (auto obj = map.get(from)) {
    map.set(fd, std::move(obj));
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

bool is_log_fd(int fd) noexcept { return fd >= 0 && fd == log::private_fd(); }

// fd is about to stop referring to its socket (close, or dup2/dup3 over it).
void closing(int fd) noexcept {
  if (SocketRef s = fd_table().get(fd); s && s->link) upgrade::closing(fd, *s);
}

}  // namespace

long close(int fd) noexcept {
  // ferry's own log descriptor does not exist as far as the app is concerned.
  if (is_log_fd(fd)) return -EBADF;
  // Untrack first: once the kernel frees the number another thread may reuse it.
  SocketRef s = fd_table().take(fd);
  if (s && s->link) upgrade::closing(fd, *s);
  if (epoll_sets().tracked(fd)) epoll_sets().take(fd);
  return sys(real.close(fd));
}

long dup(int fd) noexcept {
  long r = sys(real.dup(fd));
  alias(fd, r);
  return r;
}

long dup2(int fd, int newfd) noexcept {
  if (is_log_fd(fd)) return -EBADF;
  if (is_log_fd(newfd)) log::move_private_fd();
  if (fd != newfd) closing(newfd);
  long r = sys(real.dup2(fd, newfd));
  if (r >= 0 && fd != newfd) alias(fd, r);
  return r;
}

long dup3(int fd, int newfd, int flags) noexcept {
  if (is_log_fd(fd)) return -EBADF;
  if (is_log_fd(newfd) && fd != newfd) log::move_private_fd();
  if (fd != newfd) closing(newfd);
  long r = sys(real.dup3(fd, newfd, flags));
  alias(fd, r);
  return r;
}

long close_range(unsigned first, unsigned last, int flags) noexcept {
  int log_fd = log::private_fd();
  bool closes = !(flags & CLOSE_RANGE_CLOEXEC);
  if (closes && first <= last) {
    fd_table().for_each([&](int fd, const SocketRef& s) {
      if (static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last && s->link)
        upgrade::closing(fd, *s);
    });
    fd_table().take_range(first, last);
    epoll_sets().take_range(first, last);
  }
  if (log_fd < 0 || first > last || static_cast<unsigned>(log_fd) < first || static_cast<unsigned>(log_fd) > last)
    return sys(real.close_range(first, last, flags));
  // Close around ferry's log descriptor.
  unsigned lf = static_cast<unsigned>(log_fd);
  long r = 0;
  if (lf > first) r = sys(real.close_range(first, lf - 1, flags));
  if (r == 0 && lf < last) r = sys(real.close_range(lf + 1, last, flags));
  return r;
}

long fcntl(int fd, int cmd, void* arg) noexcept {
  if (is_log_fd(fd)) return -EBADF;
  long r = sys(real.fcntl(fd, cmd, arg));
  if (r < 0) return r;
  switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      alias(fd, r);
      break;
    case F_SETFL:
      if (SocketRef s = fd_table().get(fd))
        s->nonblocking.store((static_cast<int>(reinterpret_cast<intptr_t>(arg)) & O_NONBLOCK) != 0);
      break;
    default:
      break;
  }
  return r;
}

long ioctl(int fd, unsigned long request, void* arg) noexcept {
  if ((request == FIONREAD || request == SIOCOUTQ || request == SIOCOUTQNSD) && arg) {
    if (SocketRef s = fd_table().get(fd); s && s->transport() != Transport::kernel) {
      long n = request == FIONREAD ? stream::readable(fd, *s) : stream::unsent(fd, *s);
      if (n < 0) return n;
      *static_cast<int*>(arg) = static_cast<int>(n);
      return 0;
    }
  }
  long r = sys(real.ioctl(fd, request, arg));
  if (r == 0 && request == FIONBIO && arg) {
    if (SocketRef s = fd_table().get(fd)) s->nonblocking.store(*static_cast<int*>(arg) != 0);
  }
  return r;
}

}  // namespace ferry::api
