#include "core/base/log.h"

#include <time.h>

#include "core/base/config.h"
#include "core/base/fork_path.h"
#include "core/base/libc.h"
#include "core/base/own_fd.h"
#include "core/base/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferry::log {

FERRY_FORK_DATA constinit std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};

namespace {

FERRY_FORK_DATA constinit std::atomic<int> g_fd{-1};
// Writers between reading g_fd and their write's end: a move waits for them.
FERRY_FORK_DATA constinit std::atomic<int> g_users{0};
// A forked child's log file (FERRY_LOG_FILE with %p) is opened by its first write, not
// at the fork: most children of a forking server never log.
enum : int { kOpen, kReopen, kReopening };
FERRY_FORK_DATA constinit std::atomic<int> g_reopen{kOpen};

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    case LogLevel::trace: return "trace";
    default: return "?";
  }
}

// The program wants the log's number: writers use the new one from here on.
void move_log(int, int to) {
  g_fd.store(to);
  while (g_users.load() > 0) sched_yield();
}

int open_private(const std::string& path) {
  // Never through a symbolic link someone else planted, and readable by the user alone.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  return fd < 0 ? -1 : own::adopt(fd, move_log);
}

// Opens FERRY_LOG_FILE for process `pid`; false (and errno) when it cannot.
bool open_file(const Config& c, long pid) noexcept {
  int fd = open_private(expand_log_path(c.log_file, pid));
  g_fd.store(fd, std::memory_order_relaxed);
  return fd >= 0;
}

void warn_unopened(const Config& c, int err) noexcept {
  FERRY_LOG(warn, "log", "cannot open FERRY_LOG_FILE=%s: %s; logging to stderr", c.log_file.c_str(), strerror(err));
}

// The first writer of a forked child opens the child's own file; other writers wait.
void reopen_now() noexcept {
  int want = kReopen;
  if (!g_reopen.compare_exchange_strong(want, kReopening)) {
    while (g_reopen.load() == kReopening) sched_yield();
    return;
  }
  int old = own::release(g_fd);
  g_fd.store(-1);
  if (old >= 0) real.close(old);
  const bool opened = open_file(config(), getpid());
  const int err = errno;
  g_reopen.store(kOpen);  // before the warning, which is written through here
  if (!opened) warn_unopened(config(), err);
}

}  // namespace

// A line to a pipe or socket whose reader has gone must not end the program with
// SIGPIPE (without ferry it would not have written at all): the signal is blocked in
// this thread for the write, and one the write raised is taken back.
void write_raw(const char* text, size_t len) noexcept {
  if (sandbox::on()) return;  // not a call the program's filter may not allow (core/base/sandbox.h)
  int saved = errno;
  if (g_reopen.load(std::memory_order_relaxed) != kOpen) reopen_now();
  sigset_t pipe_only, mask, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &mask);
  const bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  g_users.fetch_add(1);
  int fd = g_fd.load();
  if (fd < 0) fd = STDERR_FILENO;
  bool broken = false;
  for (size_t off = 0; off < len;) {
    ssize_t w = real.write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    broken = w < 0 && errno == EPIPE;
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  g_users.fetch_sub(1);
  if (broken && !was_pending) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  errno = saved;
}

void write(LogLevel level, const char* module, const char* fmt, ...) noexcept {
  int saved = errno;
  char buf[1024];
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(buf, sizeof buf, "%lld.%06ld ferry[%ld] %s %s: ", static_cast<long long>(ts.tv_sec),
                   ts.tv_nsec / 1000, static_cast<long>(getpid()), level_name(level), module);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(m, sizeof buf - n - 2));
  buf[len++] = '\n';
  write_raw(buf, len);
  errno = saved;
}

void open(const Config& c, long pid) noexcept {
  g_level.store(static_cast<int>(c.log_level), std::memory_order_relaxed);
  if (c.log_file.empty()) return;
  if (!open_file(c, pid)) warn_unopened(c, errno);
}

void reopen_after_fork(const Config& c) noexcept {
  if (g_users.load() != 0) g_users.store(0);  // writers of other threads do not exist here
  if (c.log_file.find("%p") != std::string::npos) g_reopen.store(kReopen);
}

}  // namespace ferry::log
