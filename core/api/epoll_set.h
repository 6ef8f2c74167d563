// What ferry adds to one epoll instance that holds TCP sockets: the registrations of
// those sockets (so that, once a socket's bytes travel over RDMA, its events come from
// user space) and a Kicker inside the kernel set that wakes sleepers when an upgraded
// socket's state changes. The kernel set stays the program's: kernel fds, errno of
// epoll_ctl and nesting keep the kernel's exact behaviour. An upgraded socket stays
// registered in the kernel set with no interest bits, so the kernel still validates
// every epoll_ctl on it and forgets it when its file closes.
#pragma once

#include "core/base/fork_path.h"
#include "core/conn/fdtable.h"
#include "core/conn/readiness.h"

#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>

#include <memory>
#include <mutex>
#include <vector>

namespace ferry {

class EpollSet {
 public:
  // A set for an epoll instance (null only without memory). Its kicker is made with
  // its first registration: an instance that never holds a socket that can leave
  // kernel TCP costs no descriptor and no system call.
  static std::shared_ptr<EpollSet> create() noexcept;
  ~EpollSet();

  // epoll_ctl on a tracked TCP socket s.
  long ctl(int epfd, int op, int fd, epoll_event* ev, const SocketRef& s) noexcept;
  // epoll_wait/epoll_pwait/epoll_pwait2; timeout_us < 0 waits forever. False from
  // plain() means the kernel's own call is the whole answer.
  bool plain() const noexcept { return !used_.load(std::memory_order_relaxed); }
  // Registrations answered in user space (those of upgraded sockets).
  size_t users() const noexcept { return user_.load(std::memory_order_relaxed); }
  long wait(int epfd, epoll_event* evs, int max, int64_t timeout_us, const sigset_t* mask) noexcept;
  // The epoll instance itself is watched by another epoll set, poll or select: its
  // kernel readiness must then include the upgraded sockets' readiness.
  void nested() noexcept;
  // epoll_ctl added a descriptor ferry answers nothing for: one it does not track, or a
  // socket on kernel TCP for good (which epoll_ctl then never brings here).
  void other_added() noexcept {
    if (!others_.load(std::memory_order_relaxed)) others_.store(true);
  }
  // The instance existed before ferry saw it: what else it holds is unknown, for good.
  void others_unknown() noexcept { others_.store(true); }

  // Around fork (core/process/forking.cpp): the forking thread holds the set's lock, so the
  // child's copy of the registrations is whole; in the child the lock is fresh and the
  // kicker's sleepers (other threads) are gone. links() needs the lock held.
  void lock_for_fork() noexcept { mu_.lock(); }
  void unlock_after_fork() noexcept { mu_.unlock(); }
  FERRY_FORK_PATH void after_fork_child() noexcept;
  void links(std::vector<std::shared_ptr<Link>>& out) const;

 private:
  struct Reg;
  struct Steps;  // how wait() looks, arms and sleeps in wait_loop
  EpollSet() = default;
  Reg* find(int fd, const Socket* s);
  // Opens the kicker and adds it to the kernel set, once. Needs mu_.
  bool ensure_kicker(int epfd);
  // Moves registrations whose socket went to RDMA to user space; drops those the kernel
  // forgot. Needs mu_.
  void reconcile(int epfd);
  // Appends ready user-space events; needs mu_.
  int collect(epoll_event* evs, int max);
  // Drops kernel events that are ferry's own or belong to upgraded sockets, and readable
  // events that are only a client's proof (binding::proof_only). Needs mu_.
  int filter(int epfd, epoll_event* evs, int n);
  void drive_all(bool first);
  // The kernel's answer is the whole answer, as a full look would find: no member is
  // upgraded or on its way (none has a link) and no socket of the process changed
  // transport since the last reconcile().
  bool quiet() const noexcept;
  // The kernel set's events without ferry's own; `kicked` when the kicker was among them.
  long wait_kernel(int epfd, epoll_event* evs, int max, int64_t timeout_us, const sigset_t* mask, bool& kicked) noexcept;
  // Completions on every upgraded member wake the poller while this set sleeps.
  void prepare_sleep();

  std::mutex mu_;
  std::vector<std::unique_ptr<Reg>> regs_;
  size_t cursor_ = 0;  // where collect() starts: every ready socket gets its turn
  std::atomic<size_t> user_{0};  // registrations in user space
  // The kernel set has held descriptors that are not ferry's registrations (pipes,
  // eventfds, other epoll sets, sockets on kernel TCP for good...), or may have. Never
  // cleared: ferry does not follow such descriptors' removal (a closed one is not even
  // seen leaving), so it keeps looking at the kernel as long as the set lives.
  std::atomic<bool> others_{false};
  std::atomic<int64_t> kernel_looked_us_{INT64_MIN / 2};  // when wait() last asked the kernel
  readiness::Kicker kicker_;
  std::atomic<bool> nested_{false};
  std::atomic<bool> used_{false};  // has held a TCP socket: waits go through wait()'s loop
  std::atomic<bool> linked_{true};  // some member's socket has a link (as of reconcile() or ctl)
  std::atomic<uint64_t> transitions_seen_{0};  // Socket::transitions() as reconcile() began
};

// epoll instances ferry has a set for, by descriptor (dup'ed descriptors share it). A
// descriptor's mark: its set knows it holds other descriptors (other_added()), so an
// epoll_ctl adding one more need not look at the set.
FERRY_FORK_PATH FdMap<EpollSet>& epoll_sets() noexcept;

}  // namespace ferry
