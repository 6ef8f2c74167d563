#include "core/conn/poller.h"

#include "core/base/config.h"
#include "core/base/contract.h"
#include "core/base/deferral.h"
#include "core/base/fork_spare.h"
#include "core/base/sandbox.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/base/stats.h"
#include "core/rdma/rdma.h"
#include "core/rdma/rdma_lib.h"

#include <boost/lockfree/queue.hpp>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ferry::poller {
namespace {

enum class State { unknown, running, unavailable };

struct Timer {
  Clock::time_point when;
  std::function<void()> fn;
};

struct Poller {
  std::mutex start_mu;
  std::atomic<State> state{State::unknown};
  rdma::EventChannel cm;
  // ferry's own descriptors (core/base/own_fd.h), moved when the program wants their numbers.
  std::atomic<int> epfd{-1};
  std::atomic<int> wake_fd{-1};
  // Calls of other threads between reading epfd or wake_fd and their system call's end.
  std::atomic<int> fd_users{0};
  // Rounds of work done (counted under fork_gate).
  std::atomic<uint64_t> rounds{0};
  boost::lockfree::queue<std::function<void()>*> work{64};
  // The thread is about to sleep, or sleeps: work handed over must wake it. Set before
  // its last look at `work`, cleared by whoever writes wake_fd (see submit).
  std::atomic<bool> asleep{false};
  // Work handed over by post() since the thread last took the queue.
  std::atomic<int> posted{0};
  std::vector<Timer> timers;
  // The round's work, done: freed once its events were handled, so what a work item
  // held (a connection's last reference) outlives the events that name it (a watch of
  // its descriptors the poller took before the work let go of them).
  std::vector<std::unique_ptr<std::function<void()>>> done;
  std::set<rdma::Device*> devices;
  // Channels left unarmed because the program polls them; looked at every recheck_every.
  std::set<Notified*> unarmed;
  bool recheck_due = false;
  // kRecheck, doubling up to kRecheckMost while the program keeps polling every unarmed
  // channel between looks: each look wakes this thread, which takes a CPU from a
  // program spinning on its sockets.
  std::chrono::milliseconds recheck_every{5};
  // Held by the thread while it works (between sleeps) and by fork(): a child must not
  // inherit librdmacm's or libibverbs' locks taken mid-call.
  std::mutex fork_gate;
};

// post()ed work that wakes the thread: it holds connections the program let go.
constexpr int kPostedMost = 64;

constexpr auto kRecheck = std::chrono::milliseconds(5);
constexpr auto kRecheckMost = std::chrono::milliseconds(40);

// Process lifetime: the thread may outlive main's statics. A forked child gets a fresh
// one; the parent's, with its descriptors, is left alone (it serves the parent).
FERRY_FORK_DATA Poller* g_poller = new Poller;
FERRY_FORK_DATA forking::Spare<Poller> g_spare;

Poller& P() { return *g_poller; }

thread_local bool t_poller_thread = false;

// Keeps a descriptor number of the poller's from moving under a call that uses it. A
// signal handler that jumps out at the call's return would leave the count up and the
// move waiting for ever: signals wait for the end of the use (deferral::Stretch).
struct FdUse {
  deferral::Stretch stretch;
  FdUse() { P().fd_users.fetch_add(1); }
  ~FdUse() { P().fd_users.fetch_sub(1); }
  FdUse(const FdUse&) = delete;
  FdUse& operator=(const FdUse&) = delete;
};

// Set once, before the thread starts; a forked child's poller serves the same.
User g_user{};

// Tags for the epoll data of ferry's own descriptors; watchers are pointers.
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kCmTag = 2;
constexpr uint64_t kDeviceTag = 3;  // low bits; the Device* is stored with it

void handle_cm_st() {
  FERRY_POLLER_ONLY();
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(P().cm.get(), &ev) == 0) g_user.cm_event(ev);
}

void recheck_unarmed_st();

void schedule_recheck_st() {
  FERRY_POLLER_ONLY();
  if (P().unarmed.empty() || P().recheck_due) return;
  P().recheck_due = true;
  at_st(Clock::now() + P().recheck_every, recheck_unarmed_st);
}

void recheck_unarmed_st() {
  FERRY_POLLER_ONLY();
  P().recheck_due = false;
  bool all_polled = true;
  for (auto it = P().unarmed.begin(); it != P().unarmed.end();) {
    const bool again = (*it)->on_recheck_st();
    all_polled = all_polled && again;
    it = again ? std::next(it) : P().unarmed.erase(it);
  }
  P().recheck_every = all_polled ? std::min(P().recheck_every * 2, kRecheckMost) : kRecheck;
  schedule_recheck_st();
}

void handle_device_st(rdma::Device* d) {
  FERRY_POLLER_ONLY();
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(d->events.get(), &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    auto* n = static_cast<Notified*>(ctx);
    if (n->on_notified_now_st() && P().unarmed.insert(n).second) P().recheck_every = kRecheck;
  }
  schedule_recheck_st();
}

void run_timers_st() {
  FERRY_POLLER_ONLY();
  auto now = Clock::now();
  std::vector<Timer> due;
  auto& t = P().timers;
  for (auto it = t.begin(); it != t.end();) {
    if (it->when <= now) {
      due.push_back(std::move(*it));
      it = t.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& d : due) d.fn();
}

int next_timeout_ms() {
  if (P().timers.empty()) return -1;
  auto first = std::min_element(P().timers.begin(), P().timers.end(),
                                [](const Timer& a, const Timer& b) { return a.when < b.when; });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(first->when - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms + 1);
}

void loop() {
  t_poller_thread = true;
  pthread_setname_np(pthread_self(), "ferry-poller");
  // The program's signals go to the program's threads; faults stay deliverable here so
  // that FERRY_BACKTRACE can report them.
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  epoll_event evs[64];
  // Read under the gate only: a move publishes the new number under it, then waits for
  // a round (see move_fd).
  int epfd = P().epfd.load();
  for (;;) {
    // Sleeps only on an empty queue: a submit() that pushed after this look sees
    // `asleep` and writes wake_fd (both sides order their store before their load).
    P().asleep.store(true);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    int n = real.epoll_wait(epfd, evs, 64, P().work.empty() ? next_timeout_ms() : 0);
    P().asleep.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> gate(P().fork_gate);
    P().rounds.fetch_add(1);
    stats::add(stats::g.poller_wakeups, 1);
    // The work first: what the program did before these events (a connection accepted,
    // or closed) is known when they are handled.
    P().posted.store(0, std::memory_order_relaxed);
    std::function<void()>* fn = nullptr;
    while (P().work.pop(fn)) {
      (*fn)();
      P().done.emplace_back(fn);
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = evs[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        while (real.read(P().wake_fd.load(), &v, sizeof v) > 0) {
        }
      } else if (tag == kCmTag) {
        handle_cm_st();
      } else if ((tag & 7) == kDeviceTag) {
        handle_device_st(reinterpret_cast<rdma::Device*>(tag & ~uint64_t{7}));
      } else {
        reinterpret_cast<Watcher*>(evs[i].data.ptr)->on_event_st(evs[i].events);
      }
    }
    run_timers_st();
    P().done.clear();
    g_user.end_of_round();
    epfd = P().epfd.load();
  }
}

bool add_fd(int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  FdUse use;
  return real.epoll_ctl(P().epfd.load(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

// A move of one of the poller's own descriptors.
own::Mover moves(std::atomic<int>& field) {
  return [&field](int, int to) { move_fd(to, [&field](int n) { field.store(n); }); };
}

bool start() {
  Poller& p = P();
  const char* why = nullptr;
  if (!rdma_lib::load(&why)) {
    FERRY_LOG(info, "poller", "no RDMA (%s): every connection stays on TCP", why);
    return false;
  }
  p.cm.reset(rdma_create_event_channel());
  if (!p.cm) {
    FERRY_LOG(info, "poller", "no rdma_cm (%s): every connection stays on TCP", strerror(errno));
    return false;
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  rdma_lib::silence_destructors();
  if (n == 0) {
    FERRY_LOG(info, "poller", "no RDMA device: every connection stays on TCP");
    p.cm.reset();
    return false;
  }
  real.fcntl(p.cm->fd, F_SETFL, reinterpret_cast<void*>(O_NONBLOCK));
  rdma::set_fd_keeper(own_library_fd);
  own_library_fd(p.cm->fd);
  p.epfd.store(own::adopt(real.epoll_create1(EPOLL_CLOEXEC), moves(p.epfd)));
  p.wake_fd.store(own::adopt(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), moves(p.wake_fd)));
  if (p.epfd < 0 || p.wake_fd < 0 || !add_fd(p.wake_fd, kWakeTag) || !add_fd(p.cm->fd, kCmTag)) {
    FERRY_LOG(warn, "poller", "cannot set up the poller (%s): every connection stays on TCP", strerror(errno));
    return false;
  }
  std::thread(loop).detach();
  FERRY_LOG(info, "poller", "started with %d RDMA device(s)", n);
  return true;
}

}  // namespace

void serve(const User& user) noexcept {
  if (!g_user.cm_event) g_user = user;
}

bool on_poller_thread() noexcept { return t_poller_thread; }

void poller_only_violated(const char* where) noexcept {
#if FERRY_CHECKS
  contract_broken("runs on the poller thread only, called from another", where);
#endif
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) FERRY_LOG(error, "poller", "%s runs on the poller thread only, called from another", where);
}

bool available() noexcept {
  if (sandbox::on()) return false;  // no upgrade under a system-call filter (core/base/sandbox.h)
  State s = P().state.load(std::memory_order_acquire);
  if (s != State::unknown) return s == State::running;
  std::lock_guard<std::mutex> lock(P().start_mu);
  s = P().state.load();
  if (s == State::unknown) {
    s = config().enable && start() ? State::running : State::unavailable;
    P().state.store(s, std::memory_order_release);
  }
  return s == State::running;
}

namespace {
void wake() {
  uint64_t one = 1;
  FdUse use;
  real.write(P().wake_fd.load(), &one, sizeof one);
}

}  // namespace

void nudge() noexcept {
  if (P().state.load(std::memory_order_acquire) != State::running) return;  // never starts one
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (P().asleep.load() && P().asleep.exchange(false)) wake();
}

bool submit(std::function<void()> fn) noexcept {
  if (!available()) return false;
  P().work.push(new std::function<void()>(std::move(fn)));
  nudge();
  return true;
}

bool post(std::function<void()> fn, const std::atomic<bool>* awaited) noexcept {
  if (!available()) return false;
  P().work.push(new std::function<void()>(std::move(fn)));
  if (P().posted.fetch_add(1, std::memory_order_relaxed) + 1 == kPostedMost) {
    wake();
  } else if (awaited) {
    // Read after the push: the thread sets `awaited` before its own fenced look at the
    // queue, so either it sees this work or this sees the flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (awaited->load(std::memory_order_relaxed)) nudge();
  }
  return true;
}

bool run(std::function<void()> fn, std::chrono::milliseconds limit) noexcept {
  if (on_poller_thread()) {
    fn();
    return true;
  }
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  const bool submitted = submit([fn = std::move(fn), done] {
    fn();
    std::lock_guard<std::mutex> lock(done->mu);
    done->done = true;
    done->cv.notify_all();
  });
  if (!submitted) return false;
  std::unique_lock<std::mutex> lock(done->mu);
  return done->cv.wait_for(lock, limit, [&] { return done->done; });
}

bool running() noexcept { return P().state.load(std::memory_order_acquire) == State::running; }

bool unavailable() noexcept { return P().state.load(std::memory_order_acquire) == State::unavailable; }

rdma_event_channel* cm_channel() noexcept { return P().cm.get(); }

namespace {
bool watch_ctl(int op, int fd, uint32_t events, Watcher* w) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = w;
  FdUse use;
  return real.epoll_ctl(P().epfd.load(), op, fd, &ev) == 0;
}
}  // namespace

bool watch(int fd, uint32_t events, Watcher* w) { return watch_ctl(EPOLL_CTL_ADD, fd, events, w); }

bool rewatch(int fd, uint32_t events, Watcher* w) { return watch_ctl(EPOLL_CTL_MOD, fd, events, w); }

void unwatch(int fd) {
  FdUse use;
  real.epoll_ctl(P().epfd.load(), EPOLL_CTL_DEL, fd, nullptr);
}

void watch_device_st(rdma::Device* d) {
  FERRY_POLLER_ONLY();
  if (!P().devices.insert(d).second) return;
  real.fcntl(d->events->fd, F_SETFL, reinterpret_cast<void*>(O_NONBLOCK));  // moved high by rdma::device_for
  static_assert(alignof(rdma::Device) >= 8);
  add_fd(d->events->fd, reinterpret_cast<uint64_t>(d) | kDeviceTag);
}

void at_st(Clock::time_point when, std::function<void()> fn) {
  FERRY_POLLER_ONLY();
  P().timers.push_back({when, std::move(fn)});
}

void forget_st(Notified* n) noexcept {
  FERRY_POLLER_ONLY();
  P().unarmed.erase(n);
}

bool hold_for_fork() noexcept {
  if (P().state.load(std::memory_order_acquire) != State::running) return false;
  P().fork_gate.lock();
  return true;
}

void release_after_fork(bool held) noexcept {
  if (held) P().fork_gate.unlock();
}

void move_fd(int to, const std::function<void(int)>& publish) noexcept {
  Poller& p = P();
  if (t_poller_thread) {
    publish(to);
    return;
  }
  {
    // Not started (start() sets its descriptors up under start_mu): nobody uses them.
    std::lock_guard<std::mutex> starting(p.start_mu);
    if (p.state.load() != State::running) {
      publish(to);
      return;
    }
  }
  uint64_t round;
  {
    // Between two rounds: the thread and the verbs calls it makes use no number now.
    std::lock_guard<std::mutex> gate(p.fork_gate);
    publish(to);
    // The program's threads use device descriptors inside channel calls, under the
    // channel's lock: once each lock was free, they all use the new number.
    g_user.barrier();
    round = p.rounds.load();
    wake();
  }
  // Calls that read the old number before it changed.
  while (p.fd_users.load() > 0) sched_yield();
  // The thread may have read the old epoll number before the change and be about to
  // sleep on it (still ferry's: the program's dup2 waits for this): the write above
  // wakes it, and its next round reads the new number.
  for (int i = 0; p.rounds.load() == round && i < 200000; ++i) sched_yield();
}

void own_library_fd(int& field) noexcept {
  if (field < 0 || own::owns(field)) return;  // owned already (by the parent, before a fork)
  int high = own::dup_high(field);
  if (high >= 0) {
    real.close(field);
    field = high;
  }
  int* f = &field;
  own::add(field, [f](int, int to) { move_fd(to, [f](int n) { *f = n; }); });
}

void before_fork() noexcept { g_spare.make(); }

void after_fork_child() noexcept {
  // The parent's poller thread does not exist here, and its descriptors (rdma_cm's
  // event channel among them) are the parent's: the kernel refuses rdma_cm and verbs
  // commands written to a descriptor opened by another process. The child starts its
  // own poller, with its own event channel and device contexts, when it first needs it.
  g_poller = g_spare.take();
}

}  // namespace ferry::poller
