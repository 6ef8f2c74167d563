#include "core/base/own_fd.h"

#include "core/base/fd_map.h"
#include "core/base/fork_path.h"

#include "core/base/libc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace ferry::own {
namespace {

// Serializes moves, and keeps an entry's owner from going away during one.
FERRY_FORK_DATA std::mutex g_move_mu;
// Serializes changes of the table.
FERRY_FORK_DATA std::mutex g_mu;

// No descriptor below it was ever ferry's (INT_MAX while none was): the program's own
// low descriptors, nearly every one it closes, are told apart without reading the
// registry (a forked child that closes its listener then reads no page but this one).
FERRY_FORK_DATA std::atomic<int> g_lowest{INT_MAX};

struct Registry {
  FdMap<Entry> table;
};
// Never destroyed: descriptors are closed while the process exits. Made on first use:
// the log opens its descriptor from ferry's constructor, before other initializers.
FERRY_FORK_PATH Registry& reg() {
  static Registry* r = new Registry;
  return *r;
}

// Under g_mu.
void bind(int fd, std::shared_ptr<Entry> e) noexcept {
  if (fd < g_lowest.load(std::memory_order_relaxed)) g_lowest.store(fd, std::memory_order_seq_cst);
  reg().table.set(fd, std::move(e));
}

}  // namespace

int high_floor() noexcept {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1000;
  long floor = static_cast<long>(rl.rlim_cur) - 64;
  return floor > 1000 ? 1000 : (floor < 10 ? 10 : static_cast<int>(floor));
}

int dup_high(int fd) noexcept {
  int to = real.fcntl(fd, F_DUPFD_CLOEXEC, high_floor());
  if (to < 0) to = real.fcntl(fd, F_DUPFD_CLOEXEC, 3);
  return to < 0 ? -errno : to;
}

void add(int fd, Mover move) noexcept {
  if (fd < 0) return;
  auto e = std::shared_ptr<Entry>(new (std::nothrow) Entry{std::move(move)});
  if (!e) return;
  std::lock_guard<std::mutex> lock(g_mu);
  bind(fd, std::move(e));
}

int adopt(int fd, Mover move) noexcept {
  if (fd < 0) return fd;
  int high = dup_high(fd);
  if (high >= 0) {
    real.close(fd);
    fd = high;
  }
  add(fd, std::move(move));
  return fd;
}

void forget(int fd) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  reg().table.take(fd);
}

int release(const std::atomic<int>& fd) noexcept {
  std::lock_guard<std::mutex> moving(g_move_mu);
  int n = fd.load();
  forget(n);
  return n;
}

bool owns(int fd) noexcept {
  return fd >= g_lowest.load(std::memory_order_seq_cst) && reg().table.tracked(fd);
}

bool make_way(int fd) noexcept {
  std::lock_guard<std::mutex> moving(g_move_mu);
  std::shared_ptr<Entry> e = reg().table.get(fd);
  if (!e) return true;
  int to = dup_high(fd);
  if (to < 0) return false;
  e->move(fd, to);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    reg().table.take(fd);
    bind(to, e);
  }
  real.close(fd);
  return true;
}

void around(unsigned first, unsigned last, const std::function<void(unsigned, unsigned)>& f) {
  const int lowest = g_lowest.load(std::memory_order_seq_cst);
  if (lowest == INT_MAX || static_cast<unsigned>(lowest) > last) return f(first, last);
  std::vector<unsigned> mine;
  reg().table.for_each([&](int fd, const std::shared_ptr<Entry>&) {
    unsigned u = static_cast<unsigned>(fd);
    if (u >= first && u <= last) mine.push_back(u);
  });
  unsigned lo = first;
  for (unsigned u : mine) {  // in order
    if (u > lo) f(lo, u - 1);
    if (u == UINT_MAX) return;
    lo = u + 1;
  }
  if (lo <= last) f(lo, last);
}

// Whether prepare_fork took g_move_mu. Written only when it changes: a forking server's
// parent otherwise writes the fork page after every fork, one copy-on-write fault.
FERRY_FORK_DATA bool g_move_held = false;

void prepare_fork() noexcept {
  // A single-threaded process has no other thread to move a descriptor during its
  // fork (glibc never sets the flag back once a thread was made).
  const bool lock = !__libc_single_threaded;
  if (lock) g_move_mu.lock();
  if (g_move_held != lock) g_move_held = lock;
}

void parent_after_fork() noexcept {
  if (g_move_held) g_move_mu.unlock();
}

void child_after_fork() noexcept {
  // The table's lock guards only whole operations on a lock-free map: fresh, whatever
  // another thread was doing.
  new (&g_mu) std::mutex;
  new (&g_move_mu) std::mutex;
}

}  // namespace ferry::own
