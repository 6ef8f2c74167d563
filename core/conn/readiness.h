// Readiness of upgraded sockets, in user space: the poll bits kernel TCP would report
// for the connection, computed from its ring, the peer's control messages and, until
// the peer's cutover point has been read, the kernel socket. Shared by epoll, poll and
// select.
#pragma once

#include "core/base/fork_path.h"
#include "core/base/wait.h"
#include "core/conn/link.h"
#include "core/conn/readiness_state.h"
#include "core/conn/socket.h"

#include <atomic>
#include <cstdint>

namespace ferry::readiness {

// Whether s's readiness lives here rather than in the kernel: its bytes travel over RDMA.
inline bool in_user_space(const Socket& s) noexcept { return s.transport() == Transport::rdma; }


// How readiness learns whether a connection inherited from an ancestor that upgraded it
// is still carried by that owner (core/conn/handoff.h, carried(): it hands it over if
// not). Set once at startup, by the layer that knows both (core/process/runtime.cpp);
// unset, an inherited connection counts as carried.
void set_inherited_check(bool (*carried)(Socket& s) noexcept) noexcept;

// The state of an upgraded connection whose descriptor is fd (used to ask the kernel
// socket about bytes sent before the peer's cutover and about a broken connection), as
// of the last look at it: call drive() or prepare_sleep() first.
State of(int fd, Link& link) noexcept;

// A look at the connection. A call's first look (first) waits for the channel and
// polls its completion queue: the peer's control messages (its fin, its cutover) that
// arrived before the call are in the call's answer, as the kernel's would be. Later
// looks spin (Channel::poll_spinning_locked: the ring, and now and then the queue) unless another
// thread is at it. True when something changed.
bool drive(Link& link, bool first) noexcept;

// Before sleeping on the link's signal (directly, or through a Waiter that now
// listens): completions on the link will wake the poller from here on, and anything
// already there is applied (and bumps the signal).
void prepare_sleep(Link& link) noexcept;

// A wakeup a thread can sleep on in the kernel next to other descriptors: an eventfd,
// written at most once until drained, and only while someone is armed to sleep on it.
// The eventfd is one of ferry's own descriptors (core/base/own_fd.h): a program that wants
// its number gets it, and the kicker moves.
class Kicker {
 public:
  Kicker() = default;
  ~Kicker();
  Kicker(const Kicker&) = delete;
  Kicker& operator=(const Kicker&) = delete;

  bool open() noexcept;
  int fd() const noexcept { return fd_.load(std::memory_order_relaxed); }
  // Arms (count > 0) or disarms sleeping on it; kicks while disarmed cost nothing.
  void arm() noexcept { armed_.fetch_add(1, std::memory_order_seq_cst); }
  void disarm() noexcept { armed_.fetch_sub(1, std::memory_order_seq_cst); }
  bool armed() const noexcept { return armed_.load(std::memory_order_seq_cst) > 0; }
  void kick() noexcept;
  // Empties the eventfd after the kernel reported it readable.
  void drain() noexcept;
  // In a forked child: sleepers of other threads are gone; a set watched by another
  // (nested) keeps its one arm.
  FERRY_FORK_PATH void after_fork_child(int arms) noexcept;

 private:
  void move(int to) noexcept;
  std::atomic<int> fd_{-1};
  std::atomic<int> users_{0};  // kicks and drains between reading fd_ and their system call
  std::atomic<int> armed_{0};
  std::atomic<bool> pending_{false};
};

}  // namespace ferry::readiness
