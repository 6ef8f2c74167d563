#include "core/api/epoll_set.h"
#include "core/base/io_path.h"

#include "core/api/api.h"
#include "core/base/config.h"
#include "core/base/hazard.h"
#include "core/base/libc.h"
#include "core/base/stats.h"
#include "core/conn/binding.h"

#include <algorithm>
#include <new>

namespace ferry {
namespace {

constexpr uint32_t kInterest = EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM |
                               EPOLLWRBAND | EPOLLMSG | EPOLLRDHUP;
constexpr uint32_t kIn = EPOLLIN | EPOLLRDNORM | EPOLLRDHUP;
constexpr uint32_t kOut = EPOLLOUT | EPOLLWRNORM;
// While upgraded sockets keep answering, the kernel's descriptors are looked at no more
// often than this: a system call in every call would make up much of a busy server's
// cost per message. Their events wait at most this long and none is lost (level-
// triggered ones stay ready, edge-triggered ones stay queued in the kernel).
constexpr int64_t kKernelLookUs = 100;

// What the kernel set holds for an upgraded socket: the program's flags (so the kernel
// validates them exactly as it would have) and no interest in any event.
epoll_event inert(const epoll_event& ev) {
  epoll_event k{};
  k.events = (ev.events & ~kInterest) | EPOLLET;
  k.data = ev.data;
  return k;
}

// Changes the kernel registration of fd to ev. EPOLLEXCLUSIVE registrations cannot be
// modified, only replaced.
void reregister(int epfd, int fd, epoll_event ev) {
  if (real.epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return;
  if (errno == EINVAL && real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr) == 0)
    real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

// Makes the kernel registration of fd inert.
void make_inert(int epfd, int fd, const epoll_event& ev) { reregister(epfd, fd, inert(ev)); }

int to_ms(int64_t us) { return us < 0 ? -1 : static_cast<int>(std::min<int64_t>((us + 999) / 1000, INT32_MAX)); }

}  // namespace

struct EpollSet::Reg final : Waiter {
  EpollSet* set = nullptr;
  int fd = -1;
  const Socket* key = nullptr;
  std::weak_ptr<Socket> socket;
  std::shared_ptr<Link> link;  // attached once the socket has one
  epoll_event ev{};            // as the program asked
  bool user = false;           // events come from readiness::of()
  // Its kernel socket holds only its client's proof while its handshake settles
  // (binding::proof_only): its kernel registration is inert until it settles.
  bool held = false;
  bool fresh = true;           // added or modified since the last look
  bool disabled = false;       // EPOLLONESHOT fired
  uint32_t last = 0, seen_rx = 0, seen_tx = 0;
  std::atomic<bool> dirty{true};

  void wake() noexcept override {
    dirty.store(true, std::memory_order_seq_cst);
    set->kicker_.kick();
  }
  bool listening() const noexcept override { return set->kicker_.armed(); }
  void attach(const SocketRef& s) {
    if (link || s->transport() == Transport::kernel) return;  // the link is published by then
    link = s->link;
    link->signal.add(this);
    dirty.store(true);
  }
  ~Reg() {
    if (link) link->signal.remove(this);
  }
};

FERRY_IO_PATH std::shared_ptr<EpollSet> EpollSet::create() noexcept {
  EpollSet* raw = new (std::nothrow) EpollSet;
  if (!raw) return nullptr;
  // Destroyed through hazard::retire: epoll_ctl and epoll_wait borrow sets (FdMap::borrow).
  return std::shared_ptr<EpollSet>(
      raw, [](EpollSet* p) { hazard::retire(p, [](void* q) { delete static_cast<EpollSet*>(q); }); });
}

bool EpollSet::ensure_kicker(int epfd) {
  if (kicker_.fd() >= 0) return true;
  if (!kicker_.open()) return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &kicker_;
  if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, kicker_.fd(), &ev) != 0) return false;
  if (nested_.load()) kicker_.kick();  // an outer waiter looks again, now through it
  return true;
}

EpollSet::~EpollSet() {
  // Registrations first: none may kick a closed kicker.
  regs_.clear();
}

EpollSet::Reg* EpollSet::find(int fd, const Socket* s) {
  for (auto& r : regs_)
    if (r->fd == fd && r->key == s) return r.get();
  return nullptr;
}

long EpollSet::ctl(int epfd, int op, int fd, epoll_event* ev, const SocketRef& s) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  Reg* r = find(fd, s.get());
  const bool user = op == EPOLL_CTL_ADD ? readiness::in_user_space(*s) : r && r->user;
  epoll_event k;
  epoll_event* kev = ev;
  if (ev && user && op != EPOLL_CTL_DEL) {
    k = inert(*ev);
    kev = &k;
  }
  long res = api::sys(real.epoll_ctl(epfd, op, fd, kev));
  if (res != 0) return res;
  // Sleepers on this set are woken through the kicker; without one, no registration.
  if (op == EPOLL_CTL_ADD && !ensure_kicker(epfd)) {
    real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
    return -ENOMEM;
  }
  if (op == EPOLL_CTL_ADD) {
    // An earlier registration of this number whose file has closed is gone from the
    // kernel set too.
    std::erase_if(regs_, [&](const std::unique_ptr<Reg>& old) {
      if (old->fd != fd) return false;
      if (old->user) --user_;
      return true;
    });
    used_.store(true);
    auto fresh = std::make_unique<Reg>();
    fresh->set = this;
    fresh->fd = fd;
    fresh->key = s.get();
    fresh->socket = s;
    fresh->ev = *ev;
    fresh->user = user;
    fresh->attach(s);
    if (fresh->link) linked_.store(true);
    if (user) ++user_;
    r = fresh.get();
    regs_.push_back(std::move(fresh));
  } else if (op == EPOLL_CTL_MOD && r) {
    r->ev = *ev;
    r->fresh = true;
    r->disabled = false;
  } else if (op == EPOLL_CTL_DEL && r) {
    if (r->user) --user_;
    std::erase_if(regs_, [&](const std::unique_ptr<Reg>& x) { return x.get() == r; });
    return 0;
  }
  // A sleeper must look at a socket that became interesting, as the kernel's would.
  if (r && r->user) r->wake();
  return 0;
}

void EpollSet::reconcile(int epfd) {
  transitions_seen_.store(Socket::transitions());
  bool linked = false;
  for (size_t i = 0; i < regs_.size();) {
    Reg& r = *regs_[i];
    SocketRef s = r.socket.lock();
    if (!s) {
      // The file closed: the kernel dropped the registration with it.
      if (r.user) --user_;
      regs_.erase(regs_.begin() + static_cast<long>(i));
      continue;
    }
    if (r.held && (!r.link || r.link->state() != ConnState::handshake)) {
      r.held = false;  // settled: RDMA's readiness, or the kernel's again
      if (!r.disabled && fd_table().get(r.fd) == s && !readiness::in_user_space(*s)) reregister(epfd, r.fd, r.ev);
    }
    if (!r.user && s->kernel_for_good.load(std::memory_order_acquire)) {
      // Stays on kernel TCP: the kernel's registration is all there is, one of the
      // other descriptors (epoll_ctl on it no longer comes here).
      other_added();
      regs_.erase(regs_.begin() + static_cast<long>(i));
      continue;
    }
    if (r.user && s->transport() == Transport::kernel) {
      // Back on kernel TCP (a downgrade): the kernel's registration reports again, as
      // the program asked, and the socket is one of the other descriptors.
      --user_;
      if (!r.disabled && fd_table().get(r.fd) == s) reregister(epfd, r.fd, r.ev);
      other_added();
      regs_.erase(regs_.begin() + static_cast<long>(i));
      continue;
    }
    r.attach(s);
    if (!r.user && readiness::in_user_space(*s)) {
      r.user = true;
      r.fresh = true;
      r.dirty.store(true);
      ++user_;
      if (fd_table().get(r.fd) == s) make_inert(epfd, r.fd, r.ev);
    }
    if (r.link && nested_.load()) readiness::prepare_sleep(*r.link);
    // A link whose upgrade failed needs nothing more: its socket stays on TCP for good.
    linked = linked || (r.link && r.link->state() != ConnState::failed);
    ++i;
  }
  linked_.store(linked);
}

bool EpollSet::quiet() const noexcept {
  return user_.load() == 0 && !linked_.load() && !nested_.load() && Socket::transitions() == transitions_seen_.load();
}

long EpollSet::wait_kernel(int epfd, epoll_event* evs, int max, int64_t timeout_us, const sigset_t* mask,
                           bool& kicked) noexcept {
  if (timeout_us != 0) stats::add(stats::g.ready_sleeps, 1);
  const int k = real.epoll_pwait(epfd, evs, max, to_ms(timeout_us), mask);
  if (k <= 0) return k < 0 ? -errno : 0;
  std::lock_guard<std::mutex> lock(mu_);
  const int n = filter(epfd, evs, k);
  kicked = n < k;
  return n;
}

int EpollSet::collect(epoll_event* evs, int max) {
  int n = 0;
  const size_t count = regs_.size();
  size_t next = cursor_;
  for (size_t k = 0; k < count && n < max; ++k) {
    Reg& r = *regs_[(cursor_ + k) % count];
    if (!r.user || r.disabled) continue;
    const bool et = r.ev.events & EPOLLET;
    const bool dirty = r.dirty.exchange(false, std::memory_order_seq_cst);
    if (!dirty && !r.fresh && (et || r.last == 0)) continue;
    if (r.socket.expired()) continue;  // reconcile() drops it
    readiness::State st = readiness::of(r.fd, *r.link);
    const uint32_t want = (r.ev.events & kInterest) | EPOLLERR | EPOLLHUP;
    const uint32_t ready = st.events & want;
    bool report = ready != 0;
    if (et) {
      report = ready && (r.fresh || (st.rx_events != r.seen_rx && (want & kIn)) ||
                         (st.tx_events != r.seen_tx && (want & kOut)) || (ready & ~r.last));
    }
    r.fresh = false;
    r.seen_rx = st.rx_events;
    r.seen_tx = st.tx_events;
    r.last = ready;
    if (!report) continue;
    evs[n].events = ready;
    evs[n].data = r.ev.data;
    ++n;
    if (r.ev.events & EPOLLONESHOT) r.disabled = true;
    next = (cursor_ + k + 1) % count;
  }
  cursor_ = next;
  return n;
}

int EpollSet::filter(int epfd, epoll_event* evs, int n) {
  int out = 0;
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.ptr == &kicker_) {
      kicker_.drain();
      continue;
    }
    bool upgraded = false;
    if (user_ > 0 || linked_.load()) {
      for (auto& r : regs_) {
        if (r->ev.data.u64 != evs[i].data.u64) continue;
        if (r->user) {
          upgraded = true;
          break;
        }
        if (r->link && (evs[i].events & (EPOLLIN | EPOLLRDNORM)) && binding::proof_only(r->fd, *r->link)) {
          // Its readable bytes are its client's proof: not the program's news. Its
          // registration is inert until the handshake settles (reconcile(), woken by
          // the link's signal), so that a level-triggered one does not come back.
          evs[i].events &= ~static_cast<uint32_t>(EPOLLIN | EPOLLRDNORM);
          if (evs[i].events == 0) {
            r->held = true;
            make_inert(epfd, r->fd, r->ev);
            upgraded = true;
          }
          break;
        }
      }
    }
    if (!upgraded) evs[out++] = evs[i];
  }
  return out;
}

void EpollSet::drive_all(bool first) {
  for (auto& r : regs_)
    if (r->user && r->link) readiness::drive(*r->link, first);
}

void EpollSet::prepare_sleep() {
  // Every member with a link, not only those in user space already: a socket that
  // reaches RDMA while its registration is still the kernel's gets its next bytes in
  // the ring, and only a completion event can say so.
  for (auto& r : regs_)
    if (r->link && !r->disabled) readiness::prepare_sleep(*r->link);
}

void EpollSet::nested() noexcept {
  if (nested_.exchange(true)) return;
  kicker_.arm();  // for good: the outer waiter sleeps on the kernel's view of this set
  std::lock_guard<std::mutex> lock(mu_);
  prepare_sleep();
  for (auto& r : regs_) {
    if (!r->user || r->disabled || !r->link || r->socket.expired()) continue;
    const uint32_t want = (r->ev.events & kInterest) | EPOLLERR | EPOLLHUP;
    if (readiness::of(r->fd, *r->link).events & want) {
      kicker_.kick();
      break;
    }
  }
}

// wait_loop's steps for one epoll_wait: upgraded members are looked at in user space,
// the kernel set (the other descriptors and the Kicker) by epoll_pwait.
struct EpollSet::Steps {
  EpollSet& set;
  const int epfd;
  epoll_event* const evs;
  const int max;
  const sigset_t* const mask;
  bool user = false;            // some registration is in user space, as of the last look
  bool kernel_members = false;  // the kernel set holds more than upgraded sockets

  int look(bool first) noexcept {
    std::lock_guard<std::mutex> lock(set.mu_);
    set.reconcile(epfd);
    kernel_members = set.others_.load() || set.user_.load() < set.regs_.size();
    // Completions on an idle member's queue raise no event while nobody sleeps: looks
    // poll them (see Channel::poll_spinning_locked), so a program kept busy by other members still
    // sees them.
    set.drive_all(first);
    user = set.user_ > 0;
    return set.collect(evs, max);
  }
  bool spins() const noexcept { return user; }
  int arm() noexcept {
    set.kicker_.arm();
    std::lock_guard<std::mutex> lock(set.mu_);
    set.reconcile(epfd);  // a socket that reached RDMA since the last look kicked nobody
    set.prepare_sleep();
    return set.collect(evs, max);
  }
  void disarm() noexcept { set.kicker_.disarm(); }
  // The kernel's descriptors: unless user space answered and either the kernel set
  // holds nothing else to report (every registration upgraded, no other descriptor)
  // or the kernel was asked less than kKernelLookUs ago.
  bool look_kernel(int found, Stopwatch& clock) noexcept {
    if (found == 0) return true;
    if (found >= max || !kernel_members) return false;
    return clock.now() - set.kernel_looked_us_.load(std::memory_order_relaxed) >= kKernelLookUs;
  }
  long kernel(int found, int64_t timeout_us, Stopwatch& clock) noexcept {
    if (timeout_us != 0) stats::add(stats::g.ready_sleeps, 1);
    set.kernel_looked_us_.store(clock.now(), std::memory_order_relaxed);
    const int k = real.epoll_pwait(epfd, evs + found, max - found, to_ms(timeout_us), mask);
    return k < 0 ? -errno : k;
  }
  long reap(int found, long k) noexcept {
    std::lock_guard<std::mutex> lock(set.mu_);
    return found + set.filter(epfd, evs + found, static_cast<int>(k));
  }
};

long EpollSet::wait(int epfd, epoll_event* evs, int max, int64_t timeout_us, const sigset_t* mask) noexcept {
  if (max <= 0 || !evs) return api::sys(real.epoll_pwait(epfd, evs, max, 0, mask));
  if (quiet()) {
    // Nothing to look at in user space: one system call, unless all it brought was the
    // kicker (then the loop below looks again).
    bool kicked = false;
    const long k = wait_kernel(epfd, evs, max, timeout_us, mask, kicked);
    if (k != 0 || !kicked || timeout_us == 0) return k;
  }
  Steps steps{*this, epfd, evs, max, mask};
  const long n = wait_loop(steps, timeout_us, config().poll_us, spin_budget());
  if (n > 0 && nested_.load()) {
    // Level-triggered members still ready keep the outer waiter's view of this set ready.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : regs_)
      if (r->user && r->last && !(r->ev.events & EPOLLET)) r->wake();
  }
  return n;
}

void EpollSet::after_fork_child() noexcept {
  new (&mu_) std::mutex;
  kicker_.after_fork_child(nested_.load() ? 1 : 0);
}

void EpollSet::links(std::vector<std::shared_ptr<Link>>& out) const {
  for (auto& r : regs_)
    if (r->link) out.push_back(r->link);
}

namespace {
// Never destroyed, like the fd table, and beside it among the data a forked child
// writes anyway (core/base/fork_path.h): a server's worker makes its epoll set as it starts.
union SetsHolder {
  constexpr SetsHolder() : sets() {}
  FERRY_FORK_PATH ~SetsHolder() {}  // runs at every exit
  FdMap<EpollSet> sets;
};
FERRY_FORK_DATA alignas(SetsHolder) constinit SetsHolder g_sets;  // no padding: see g_table
}  // namespace

FdMap<EpollSet>& epoll_sets() noexcept { return g_sets.sets; }

}  // namespace ferry
