// The poller thread: one per process, started on first need. It owns the rdma_cm event
// channel (whose events go to its User), watches every device's completion channel and
// the descriptors it is asked to (a Watcher each), and runs timers and work handed to
// it. It sleeps in epoll_wait when there is nothing to do.
//
// Functions ending in _st run on the poller thread only.
#pragma once

#include "core/base/fork_path.h"
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <functional>

namespace ferry::rdma {
struct Device;
}

namespace ferry::poller {

using Clock = std::chrono::steady_clock;

// Whether the calling thread is the poller thread.
bool on_poller_thread() noexcept;
// Says so (once, as an error) when a poller-only function runs on another thread.
void poller_only_violated(const char* where) noexcept;
#define FERRY_POLLER_ONLY()                                                          \
  do {                                                                               \
    if (!::ferry::poller::on_poller_thread()) ::ferry::poller::poller_only_violated(__func__); \
  } while (0)

// What the poller serves, told to it before it starts (serve()): it knows no
// connection, only these calls. Each runs on the poller thread.
struct User {
  void (*cm_event)(rdma_cm_event* ev);  // one rdma_cm event, which it acknowledges
  void (*end_of_round)();               // after each round of events, timers and work
  // With the poller held between rounds: every lock a call that may use one of the
  // poller's descriptors holds is taken and released once (move_fd).
  void (*barrier)() noexcept;
};
void serve(const User& user) noexcept;

// Starts the poller if RDMA can be used in this process; false (remembered) when not.
// serve() comes first.
bool available() noexcept;
// Whether this process's poller runs (never starts one).
bool running() noexcept;
// True once available() found RDMA unusable here: no socket of the process can ever
// leave kernel TCP. Never starts anything.
bool unavailable() noexcept;
// Runs fn on the poller thread, soon. False when there is no poller.
bool submit(std::function<void()> fn) noexcept;
// Runs fn on the poller thread at its next round, without waking it for fn: for work
// that nothing waits for yet (a server connection's launch, freeing what a connection
// that never upgraded held). A round comes with the thread's next event or submit(),
// or after some dozens of posts. Work runs in the order it was handed over, submitted
// or posted. `awaited`, if given, is a flag the poller thread sets (before it goes to
// sleep) when work like fn is awaited: read after the push, it makes this a submit.
bool post(std::function<void()> fn, const std::atomic<bool>* awaited = nullptr) noexcept;
// Wakes the thread if it sleeps or is about to: what was posted before runs soon.
void nudge() noexcept;

// Runs fn on the poller thread and returns once it has run, or after `limit` (then
// false, and fn still runs later). False at once when there is no poller.
bool run(std::function<void()> fn, std::chrono::milliseconds limit) noexcept;

rdma_event_channel* cm_channel() noexcept;

// Something the poller's epoll reports to.
struct Watcher {
  virtual void on_event_st(uint32_t events) = 0;
  virtual ~Watcher() = default;
};
// Any thread: the poller's epoll reports fd's events to w until unwatch(fd).
bool watch(int fd, uint32_t events, Watcher* w);
// Changes a watch's events (EPOLL_CTL_MOD): re-arms an EPOLLONESHOT watch.
bool rewatch(int fd, uint32_t events, Watcher* w);
void unwatch(int fd);
// Makes sure the device's completion channel is watched.
void watch_device_st(rdma::Device* d);
// Runs fn at (or soon after) `when`.
void at_st(Clock::time_point when, std::function<void()> fn);
// What a completion queue's context points at: the poller hands it the queue's
// notifications, and looks again now and then at one it left unarmed (its program
// polls it instead). Each takes whatever lock it needs.
struct Notified {
  // The notification came. True: left unarmed; on_recheck_st() it a tick later.
  virtual bool on_notified_now_st() noexcept = 0;
  // A later look at an unarmed one. True while it should be looked at again.
  virtual bool on_recheck_st() noexcept = 0;

 protected:
  ~Notified() = default;
};
// One going away: the poller must not look at it again.
void forget_st(Notified* n) noexcept;

// ferry's descriptors that the poller thread uses, its own or a library's (the rdma_cm
// event channel, device contexts, completion channels): see core/base/own_fd.h. move_fd
// publishes a new number `to` (publish(to), while the thread is held between rounds)
// and returns once no call uses the old one: the poller thread, the program's threads
// inside channel calls (every channel's lock is taken once), and the thread's sleep.
void move_fd(int to, const std::function<void(int)>& publish) noexcept;
// Registers a descriptor a library opened for the poller's work and keeps in `field`
// (moved high first, and the field rewritten).
void own_library_fd(int& field) noexcept;

// Around fork(): the poller thread is held between two rounds of work, so the child
// inherits no lock taken in the middle of an rdma_cm or verbs call.
bool hold_for_fork() noexcept;
void release_after_fork(bool held) noexcept;
// In a forked child: a fresh poller, started on first need (the parent's thread does
// not exist there).
void before_fork() noexcept;
FERRY_FORK_PATH void after_fork_child() noexcept;

}  // namespace ferry::poller
