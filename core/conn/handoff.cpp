#include "core/conn/handoff.h"

#include "core/base/config.h"
#include "core/base/fork_path.h"
#include "core/base/libc.h"
#include "core/base/lock.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/base/wait.h"
#include "core/conn/binding.h"
#include "core/conn/channel.h"
#include "core/conn/downgrade.h"
#include "core/conn/fdtable.h"
#include "core/conn/link.h"
#include "core/conn/link_wait.h"
#include "core/conn/poller.h"
#include "core/conn/upgrade.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::handoff {

constexpr int kSlots = 4096;

// A board slot's states. The owner writes free, live, serving and handed/failed; a
// child writes asked.
enum : uint32_t { kFree = 0, kLive = 1, kAsked = 2, kServing = 3, kHanded = 4, kFailed = 5 };

// Shared by a process and its descendants (MAP_SHARED, made before the fork).
struct Board {
  // Descendants alive that hold some connection on the board (counted at their fork,
  // uncounted when they exit or exec; one killed stays counted). While there are
  // none, the owner closes and exits as it would without a board.
  std::atomic<int> holders{0};
  struct Slot {
    std::atomic<uint64_t> id{0};  // the link's serial: a slot reused for another link reads as released
    std::atomic<uint32_t> state{kFree};
  } slots[kSlots];
};

// One process's record of its board; never freed, so that a descendant's copy (the
// same address) stays valid. `kick` is the eventfd the owner's poller watches, as this
// process numbers it (ferry's own descriptor: moved if the program closes the number).
struct Owner final : poller::Watcher {
  pid_t pid = 0;
  Board* board = nullptr;
  std::atomic<int> kick{-1};
  Lock mu;  // links, next_id, cursor
  std::unique_ptr<std::shared_ptr<Link>[]> links{new std::shared_ptr<Link>[kSlots]};
  uint64_t next_id = 1;
  int cursor = 0;
  void on_event_st(uint32_t events) override;
};

namespace {

FERRY_FORK_DATA Owner* g_owner = nullptr;  // this process's board, made at its first fork with upgraded connections
FERRY_FORK_DATA constinit Lock g_make;
// The boards whose connections this process holds, as a descendant (counted as a
// holder on each).
FERRY_FORK_DATA std::vector<Owner*>* g_holding = nullptr;
// The boards a child about to be forked will hold, counted for it by the parent before
// the fork (so that no close of the parent's can run before the count), and the last
// fork's, uncounted if that fork failed. The forking thread's own: threads may fork at
// once. Plain pointers: a thread_local with a destructor costs every exiting process
// (a server's forked children among them) a call at exit.
thread_local constinit std::vector<Owner*>* g_forking = nullptr;
thread_local constinit std::vector<Owner*>* g_last_fork = nullptr;

// Writes only a change: around a fork, every page written costs a copy.
template <class T>
void set(T& var, T value) {
  if (var != value) var = value;
}

void drop(std::vector<Owner*>*& v) {
  delete v;
  v = nullptr;
}

}  // namespace

long to_tcp(int fd, Socket& s) noexcept {
  if (!s.link || s.link->inherited || s.transport() == Transport::kernel) return 0;
  if (upgrade::forgo(s)) return 0;  // never committed: TCP for good
  Link& link = *s.link;
  const int64_t settle = now_us() + (static_cast<int64_t>(config().upgrade_timeout_ms) + 1000) * 1000;
  // A handshake in flight settles first: once the peer cut over, only this side can
  // tell it where to resend from.
  while (link.state() == ConnState::handshake && now_us() < settle) {
    const uint32_t seen = link.signal.load();
    if (link.state() != ConnState::handshake) break;
    wait_for(link, seen, std::min<int64_t>(settle, now_us() + 10000));
  }
  if (s.transport() == Transport::kernel) return 0;
  if (!link.established()) return 0;  // still not settled: it never reached RDMA
  // So does a binding in flight (core/conn/binding.h): until the client has proven it
  // holds the TCP connection and heard so, neither end may speak of the stream over
  // RDMA (the other would fail the channel and go back to TCP its own way), and the
  // client's proof must be taken where it is, not left to whoever reads TCP next.
  const int64_t bound = now_us() + std::chrono::duration_cast<std::chrono::microseconds>(binding::kPatience).count() +
                        1000000;
  while (!link.down() && !link.forged.load() && !link.channel->trusted() && now_us() < bound) {
    const uint32_t seen = link.signal.load();
    if (link.down() || link.forged.load() || link.channel->trusted()) break;
    wait_for(link, seen, std::min<int64_t>(bound, now_us() + 10000));
  }
  {
    std::lock_guard<Lock> rx(s.rx_mu);
    std::lock_guard<Lock> tx(s.tx_mu);
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    if (!link.down()) ch.poll_all_locked();
    // Both directions ended: nothing is left to carry on over TCP.
    if (link.fin_sent.load() && ch.peer_fin()) return 0;
    downgrade::Why why = downgrade::Why::failed;
    const bool read_past = ch.peer_cutover_known() && link.tcp_received.load() >= ch.peer_cutover();
    if (link.down() || downgrade::leaving_locked(link, ch, why) || (read_past && downgrade::tcp_took_over(fd, link, why)) ||
        !ch.hand_off_locked()) {
      // Already going back (failed over, the peer went back or handed over first), or
      // no hand-off message can go: that going back finishes before the socket leaves
      // the program, nothing of it waiting for the program's next send.
      link.leaving.store(true);
      downgrade::want(link, why);
    } else {
      link.handed_off.store(true);
      downgrade::want(link, downgrade::Why::handoff);
    }
    link.signal.bump();
  }
  // The backlog may wait for the peer's reader: as long as a blocked send would.
  const int64_t until = now_us() + 10 * 1000000;
  for (;;) {
    const uint32_t seen = link.signal.load();
    int err = 0;
    const downgrade::Send how = downgrade::look_tx(fd, link, err);
    (void)downgrade::readable(fd, link);  // moves the receive side on
    downgrade::finish_if_done(link);
    if (s.transport() == Transport::kernel) return 0;
    if (how == downgrade::Send::dead) return -(err ? err : EPIPE);
    if (downgrade::ended(link)) return 0;  // TCP ended before the peer's header: so it reads
    if (now_us() >= until) {
      FERRY_LOG(warn, "handoff", "fd %d: could not go back to TCP intact before leaving the program", fd);
      downgrade::give_up(fd, link, "the hand-off did not finish");
      return -ETIMEDOUT;
    }
    wait_for(link, seen, until);
  }
}

namespace {

// A socket that may leave kernel TCP, or has: one this process can hand over.
bool ours(const SocketRef& s) { return s && s->link && !s->link->inherited && s->transport() != Transport::kernel; }

void hand(int fd, Socket& s) {
  const long r = to_tcp(fd, s);
  if (r < 0) FERRY_LOG(info, "handoff", "fd %d: not handed over intact (%s)", fd, strerror(static_cast<int>(-r)));
}

// The descriptor this process uses for s: the link's own, or another that holds s.
int fd_of(const Link& link, const Socket* s) {
  if (link.fd >= 0 && fd_table().get(link.fd).get() == s) return link.fd;
  int found = -1;
  fd_table().for_each([&](int fd, const SocketRef& r) {
    if (found < 0 && r.get() == s) found = fd;
  });
  return found;
}

Owner* make_owner() {
  void* m = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    munmap(m, sizeof(Board));
    return nullptr;
  }
  auto* o = new (std::nothrow) Owner;
  if (!o) {
    real.close(fd);
    munmap(m, sizeof(Board));
    return nullptr;
  }
  o->pid = getpid();
  o->board = new (m) Board;
  o->kick.store(own::adopt(fd, [o](int from, int to) {
    o->kick.store(to);
    if (o->pid != getpid()) return;  // a descendant's copy: only the number changes
    poller::unwatch(from);
    poller::watch(to, EPOLLIN, o);
  }));
  poller::watch(o->kick.load(), EPOLLIN, o);
  return o;
}

// The owner takes s's link off its board (once handed over: a child that asks later
// finds the serial gone and uses TCP). One still upgraded (another descriptor of it
// stays open) goes on the board again at the next fork.
void take_off(Link& link) {
  Owner* o = link.owner;
  if (!o || o != g_owner || o->pid != getpid() || link.board_slot < 0) return;
  std::lock_guard<Lock> lock(o->mu);
  Board::Slot& slot = o->board->slots[link.board_slot];
  slot.id.store(0);
  slot.state.store(kFree);
  o->links[link.board_slot].reset();
  link.board_slot = -1;
  link.owner = nullptr;
}

// The owner hands over a connection on its board; the slot says how it went. With no
// descriptor of it left, the program is closing its last one (a close untracks the
// number first) or has closed it: that close hands the connection over and takes it
// off the board (closing()), which the child reads as handed over, so the slot is
// left to it.
void serve(Owner* o, int i, std::shared_ptr<Link> link) {
  SocketRef s = link->socket.lock();
  const int fd = s ? fd_of(*link, s.get()) : -1;
  if (fd < 0) return;
  const long r = to_tcp(fd, *s);
  uint32_t serving = kServing;  // unless taken off meanwhile (and perhaps reused)
  o->board->slots[i].state.compare_exchange_strong(serving, r == 0 ? kHanded : kFailed);
  if (r != 0) FERRY_LOG(info, "handoff", "a forked child's connection was not handed to TCP (%s)", strerror(static_cast<int>(-r)));
}

}  // namespace

FERRY_FORK_PATH void let_go() noexcept;

void Owner::on_event_st(uint32_t) {
  FERRY_POLLER_ONLY();
  uint64_t v;
  (void)!real.read(kick.load(), &v, sizeof v);
  for (int i = 0; i < kSlots; ++i) {
    uint32_t asked = kAsked;
    if (board->slots[i].state.load() != kAsked || !board->slots[i].state.compare_exchange_strong(asked, kServing))
      continue;
    std::shared_ptr<Link> link;
    {
      std::lock_guard<Lock> lock(mu);
      link = links[i];
    }
    if (!link) {
      board->slots[i].state.store(kHanded);  // taken off once handed over
      continue;
    }
    // A hand-over waits for the peer: never on the poller thread.
    try {
      std::thread(serve, this, i, std::move(link)).detach();
    } catch (...) {
      board->slots[i].state.store(kFailed);
    }
  }
}

namespace {

// Every upgraded connection of this process (an ancestor's too), or only those whose
// descriptor survives an exec, back to kernel TCP.
void all_to_tcp(bool surviving_exec) {
  // Collected first: a hand-off waits, and the table must not be held meanwhile.
  std::vector<std::pair<int, SocketRef>> leaving;
  fd_table().for_each([&](int fd, const SocketRef& s) {
    if (ours(s) || (s->link && s->link->orphaned)) leaving.emplace_back(fd, s);
  });
  for (auto& [fd, s] : leaving) {
    if (surviving_exec) {
      const int flags = real.fcntl(fd, F_GETFD);
      if (flags < 0 || (flags & FD_CLOEXEC)) continue;
    }
    if (s->link->orphaned) {
      ask_owner(*s);  // an ancestor's: it hands it over
    } else {
      hand(fd, *s);
    }
  }
}

}  // namespace

void before_exec() noexcept {
  all_to_tcp(true);
  let_go();  // what the new program keeps is on TCP now
}

void all_back() noexcept { all_to_tcp(false); }

namespace {

// Puts l on o's board (under o->mu). A full board leaves it off: a child's use of it
// then fails as a reset.
void register_link(Owner* o, const std::shared_ptr<Link>& l) {
  if (l->owner) return;  // twice in the table (dup)
  int i = -1;
  for (int k = 0; k < kSlots && i < 0; ++k) {
    const int c = (o->cursor + k) % kSlots;
    if (!o->links[c] && o->board->slots[c].state.load() == kFree) i = c;
  }
  if (i < 0) return;
  o->cursor = (i + 1) % kSlots;
  const uint64_t id = o->next_id++;
  o->links[i] = l;
  o->board->slots[i].id.store(id);
  o->board->slots[i].state.store(kLive);
  l->owner = o;
  l->board_slot = i;
  l->board_id = id;
}

// Counts the child about to be forked as a holder on every board of a connection in
// the table (this process's own, and its ancestors' it still holds).
void count_holds() {
  if (g_forking) drop(g_forking);
  std::vector<Owner*> owners;
  fd_table().for_each([&](int, const SocketRef& s) {
    const Link* l = s->link.get();
    Owner* o = l ? l->owner : nullptr;
    if (!o || l->board_slot < 0 || (o != g_owner && !l->orphaned)) return;
    if (std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
  });
  if (owners.empty()) return;  // nothing to hold: nothing allocated
  g_forking = new (std::nothrow) std::vector<Owner*>(std::move(owners));
  if (!g_forking) return;
  for (Owner* o : *g_forking) o->board->holders.fetch_add(1);
}

}  // namespace

void before_fork() noexcept {
  if (Link::alive() == 0) {
    if (g_forking) drop(g_forking);
    return;
  }
  std::vector<std::shared_ptr<Link>> up;
  fd_table().for_each([&](int, const SocketRef& s) {
    const auto& l = s->link;
    if (!l || l->inherited || l->owner || l->down()) return;
    // Upgraded, or in a handshake that may still cut over (one never used is the
    // child's to upgrade itself: reclaimable).
    const bool handshake = s->transport() == Transport::upgrading && l->arm.load() != Link::undecided &&
                           l->state() == ConnState::handshake;
    if ((l->established() && s->transport() == Transport::rdma) || handshake) up.push_back(l);
  });
  if (!up.empty()) {
    std::lock_guard<Lock> make(g_make);
    if (!g_owner) g_owner = make_owner();
    if (Owner* o = g_owner) {
      std::lock_guard<Lock> lock(o->mu);
      for (auto& l : up) register_link(o, l);
    }
  }
  count_holds();
}

void after_fork_parent() noexcept {
  if (!g_last_fork && !g_forking) return;
  delete g_last_fork;
  g_last_fork = g_forking;
  g_forking = nullptr;
}

void fork_failed() noexcept {
  if (!g_last_fork) return;
  for (Owner* o : *g_last_fork) o->board->holders.fetch_sub(1);
  drop(g_last_fork);
}

void after_fork_child() noexcept {
  set<Owner*>(g_owner, nullptr);
  set(g_holding, g_forking);  // counted by the parent
  set<std::vector<Owner*>*>(g_forking, nullptr);
  set<std::vector<Owner*>*>(g_last_fork, nullptr);  // the parent's to uncount
}

void let_go() noexcept {
  std::vector<Owner*>* holding = g_holding;
  if (!holding) return;
  g_holding = nullptr;
  for (Owner* o : *holding) o->board->holders.fetch_sub(1);
  delete holding;
}

bool ask_owner(Socket& s) noexcept {
  Link& link = *s.link;
  Owner* o = link.owner;
  if (!o || link.board_slot < 0) return false;
  Board::Slot& slot = o->board->slots[link.board_slot];
  const int64_t until = now_us() + 15 * 1000000;
  for (;;) {
    const uint32_t state = slot.state.load();
    if (slot.id.load() != link.board_id || state == kHanded) break;  // off the board: handed over
    if (state == kFailed) return false;
    if (state == kLive) {
      uint32_t live = kLive;
      if (slot.state.compare_exchange_strong(live, kAsked)) {
        uint64_t one = 1;
        (void)!real.write(o->kick.load(), &one, sizeof one);
      }
      continue;
    }
    if ((kill(o->pid, 0) != 0 && errno == ESRCH) || now_us() > until) {
      FERRY_LOG(warn, "handoff", "the process that upgraded an inherited connection did not hand it over");
      return false;
    }
    timespec pause{0, 1000000};
    nanosleep(&pause, nullptr);
  }
  link.orphaned = false;
  // Whatever the parent had reached when it forked, the owner made it TCP's.
  switch (const ConnState now = link.state()) {
    case ConnState::handshake: link.transition(now, ConnState::failed); break;
    case ConnState::established:
    case ConnState::downgrading: link.transition(now, ConnState::downgraded); break;
    case ConnState::failed:
    case ConnState::downgraded: break;
  }
  return true;
}

bool carried(Socket& s) noexcept {
  if (s.transport() == Transport::kernel) return false;
  return !(s.link && s.link->orphaned && ask_owner(s));
}

void closing(int fd, Socket& s) noexcept {
  if (!s.link || s.link->owner != g_owner || !g_owner || s.link->board_slot < 0) return;
  if (s.transport() != Transport::kernel && g_owner->board->holders.load() > 0) hand(fd, s);
  take_off(*s.link);
}

void at_exit() noexcept {
  let_go();
  if (!g_owner || g_owner->pid != getpid() || g_owner->board->holders.load() == 0) return;
  std::vector<std::shared_ptr<Link>> on;
  {
    std::lock_guard<Lock> lock(g_owner->mu);
    for (int i = 0; i < kSlots; ++i)
      if (g_owner->links[i]) on.push_back(g_owner->links[i]);
  }
  for (auto& l : on) {
    SocketRef s = l->socket.lock();
    const int fd = s ? fd_of(*l, s.get()) : -1;
    if (fd >= 0 && s->transport() != Transport::kernel) hand(fd, *s);
  }
}

void before_passing(const msghdr* msg) noexcept {
  if (!msg || !msg->msg_control || msg->msg_controllen == 0) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (int i = 0; i < n; ++i) {
      SocketRef s = fd_table().get(fds[i]);
      if (!ours(s)) continue;
      upgrade::passing(fds[i], *s);  // unused: a receiver of this tree may serve it over RDMA
      hand(fds[i], *s);
    }
  }
}

}  // namespace ferry::handoff
