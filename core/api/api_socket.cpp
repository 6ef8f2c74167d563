#include "core/api/api.h"

#include "core/api/stream.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/claims.h"
#include "core/conn/fdtable.h"
#include "core/conn/handoff.h"
#include "core/conn/link.h"
#include "core/conn/send_side.h"
#include "core/conn/upgrade.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace ferry::api {
namespace {

bool is_tcp(int domain, int type, int protocol) {
  return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
         (protocol == 0 || protocol == IPPROTO_TCP);
}

FERRY_IO_PATH void track(int fd, SocketRef s) {
  if (!fd_table().set(fd, std::move(s))) {
    FERRY_LOG(warn, "fdtable", "fd %d: out of memory for the fd table; socket left untracked", fd);
    return;
  }
  stats::add(stats::g.tcp_sockets, 1);
}

// After the upgrade was started or not: a connection no upgrade is under way for (none
// began, or it already failed) never leaves kernel TCP.
void stayed_on_tcp(int fd, Socket& s) {
  if (s.transport() != Transport::kernel) return;
  s.kernel_for_good.store(true, std::memory_order_release);
  fd_table().mark(fd, &s);
  stats::add(stats::g.connections_on_tcp, 1);
}

// Non-blocking connects not yet seen finished: while there are none, a send has
// nothing to settle and costs no extra lookup.
std::atomic<int> g_connecting{0};

FERRY_IO_PATH void connected(int fd, const SocketRef& s) {
  if (s->role() == Role::connecting) g_connecting.fetch_sub(1, std::memory_order_relaxed);
  s->set_role(Role::active);
  stats::add(stats::g.connections_active, 1);
  upgrade::client_connected(fd, s);
  stayed_on_tcp(fd, *s);
}

int64_t timeval_us(const void* val, socklen_t len) {
  if (len < sizeof(timeval)) return -1;
  const auto* tv = static_cast<const timeval*>(val);
  return tv->tv_sec * 1000000LL + tv->tv_usec;
}

}  // namespace

FERRY_IO_PATH long socket(int domain, int type, int protocol) noexcept {
  long fd = sys(real.socket(domain, type, protocol));
  if (fd >= 0 && config().enable && is_tcp(domain, type, protocol)) {
    auto s = make_socket(domain, Role::fresh);
    s->nonblocking.store((type & SOCK_NONBLOCK) != 0);
    track(static_cast<int>(fd), std::move(s));
  }
  return fd;
}

long bind(int fd, const sockaddr* addr, socklen_t len) noexcept { return sys(real.bind(fd, addr, len)); }

long listen(int fd, int backlog) noexcept {
  long r = sys(real.listen(fd, backlog));
  if (r == 0) {
    if (SocketRef s = fd_table().get(fd); s && s->role() != Role::listener) {
      s->set_role(Role::listener);
      s->kernel_for_good.store(true, std::memory_order_release);
      fd_table().mark(fd, s.get());
      stats::add(stats::g.listeners, 1);
      upgrade::server_listening(fd, s);
    }
  }
  return r;
}

namespace {
FERRY_IO_PATH long accepted(int listener, long fd, int flags) {
  if (fd < 0) return fd;
  // Borrowed: a forking server accepts between forks, and a reference count is a write
  // to a page the last child shares.
  FdTable::Borrowed l;
  fd_table().borrow(listener, l);
  if (l) {
    auto s = make_socket(l->family(), Role::passive);
    s->nonblocking.store((flags & SOCK_NONBLOCK) != 0);
    s->inherit_options(*l);
    track(static_cast<int>(fd), s);
    stats::add(stats::g.connections_passive, 1);
    const int owner = l->listening_pid.load();
    if (owner == 0 || owner == getpid()) {
      upgrade::server_accepted(static_cast<int>(fd), s, false);
    } else if (claims::shared()) {  // the listening process redirects its request here
      upgrade::server_accepted(static_cast<int>(fd), s, true);
    } else {
      stats::add(stats::g.tcp_other_listener, 1);
    }
    stayed_on_tcp(static_cast<int>(fd), *s);
  }
  return fd;
}
}  // namespace

FERRY_IO_PATH long accept(int fd, sockaddr* addr, socklen_t* len) noexcept {
  return accepted(fd, sys(real.accept(fd, addr, len)), 0);
}

FERRY_IO_PATH long accept4(int fd, sockaddr* addr, socklen_t* len, int flags) noexcept {
  return accepted(fd, sys(real.accept4(fd, addr, len, flags)), flags);
}

FERRY_IO_PATH long connect(int fd, const sockaddr* addr, socklen_t len) noexcept {
  long r = sys(real.connect(fd, addr, len));
  if (r == 0 || r == -EINPROGRESS || r == -EISCONN) {
    if (SocketRef s = fd_table().get(fd)) {
      if (r == -EINPROGRESS) {
        if (s->role() != Role::connecting) g_connecting.fetch_add(1, std::memory_order_relaxed);
        s->set_role(Role::connecting);
      } else if (r == 0 || s->role() == Role::connecting) {
        // Done, or a non-blocking connect found finished by asking again.
        connected(fd, s);
      }
    }
  }
  return r;
}

void settle_connect(int fd) noexcept {
  if (g_connecting.load(std::memory_order_relaxed) == 0) return;
  SocketRef s = fd_table().get(fd);
  if (!s || s->role() != Role::connecting) return;
  sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  if (real.getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) connected(fd, s);
}

FERRY_IO_PATH long shutdown(int fd, int how) noexcept {
  if (SocketRef s = fd_table().get(fd); s && handoff::carried(*s)) return stream::shutdown(fd, *s, how);
  return sys(real.shutdown(fd, how));
}

FERRY_IO_PATH long getsockopt(int fd, int level, int name, void* val, socklen_t* len) noexcept {
  long r = sys(real.getsockopt(fd, level, name, val, len));
  // A non-blocking connect is settled when the app collects its SO_ERROR.
  if (r == 0 && level == SOL_SOCKET && name == SO_ERROR && *len >= sizeof(int) && *static_cast<int*>(val) == 0) {
    settle_connect(fd);
  }
  return r;
}

FERRY_IO_PATH long setsockopt(int fd, int level, int name, const void* val, socklen_t len) noexcept {
  long r = sys(real.setsockopt(fd, level, name, val, len));
  if (r != 0) return r;
  FdTable::Borrowed s;
  fd_table().borrow(fd, s);
  // A connection on kernel TCP for good needs none of these: the kernel applies them.
  // A listener's are its future connections' (Socket::inherit_options).
  if (!s || (s->kernel_for_good.load(std::memory_order_relaxed) && s->role() != Role::listener)) return r;
  if (level == IPPROTO_TCP && name == TCP_NODELAY && len >= sizeof(int)) {
    s->nodelay.store(*static_cast<const int*>(val) != 0);
  } else if (level == SOL_SOCKET && name == SO_RCVTIMEO) {
    s->rcvtimeo_us.store(timeval_us(val, len));
  } else if (level == SOL_SOCKET && name == SO_SNDTIMEO) {
    // Under tx_mu, and set again: a splice before the cutover lends the socket a
    // shorter one for its call and then restores sndtimeo_us (stream_send.cpp).
    std::lock_guard<Lock> tx(s->tx_mu);
    s->sndtimeo_us.store(timeval_us(val, len));
    real.setsockopt(fd, level, name, val, len);
  } else if (level == SOL_SOCKET && name == SO_SNDBUF) {
    int v = 0;
    socklen_t vl = sizeof v;
    if (real.getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &vl) == 0) s->sndbuf.store(v);
    if (s->transport() != Transport::kernel) send_side::sndbuf_changed(*s.get());
  } else if (level == SOL_SOCKET && name == SO_LINGER && len >= sizeof(linger)) {
    const auto* lg = static_cast<const linger*>(val);
    s->linger_s.store(lg->l_onoff ? lg->l_linger : -1);
  } else if (level == SOL_SOCKET && name == SO_RCVLOWAT) {
    int v = 1;
    socklen_t vl = sizeof v;
    if (real.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &vl) == 0) s->rcvlowat.store(std::max(v, 1));
    if (s->transport() != Transport::kernel) {  // the link is published (Link::rcvlowat)
      s->link->rcvlowat.store(s->rcvlowat.load());
      s->link->signal.bump();  // as the kernel's, sleepers and watchers look again
    }
  }
  return r;
}

FERRY_IO_PATH long getsockname(int fd, sockaddr* addr, socklen_t* len) noexcept {
  return sys(real.getsockname(fd, addr, len));
}
FERRY_IO_PATH long getpeername(int fd, sockaddr* addr, socklen_t* len) noexcept {
  return sys(real.getpeername(fd, addr, len));
}

}  // namespace ferry::api
