#include "core/log.h"

#include <time.h>

#include "core/libc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferry::log {

constinit std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};

namespace {

constinit std::atomic<int> g_fd{-1};

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

// A descriptor number apps are unlikely to ask for by name.
int high_fd_floor() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1000;
  long floor = static_cast<long>(rl.rlim_cur) - 64;
  return floor > 1000 ? 1000 : (floor < 10 ? 10 : static_cast<int>(floor));
}

int open_private(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int high = real.fcntl(fd, F_DUPFD_CLOEXEC, high_fd_floor());
  if (high >= 0) {
    real.close(fd);
    return high;
  }
  return fd;
}

}  // namespace

void write_raw(const char* text, size_t len) noexcept {
  int saved = errno;
  int fd = g_fd.load(std::memory_order_relaxed);
  if (fd < 0) fd = STDERR_FILENO;
  for (size_t off = 0; off < len;) {
    ssize_t w = real.write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
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
  int fd = open_private(expand_log_path(c.log_file, pid));
  g_fd.store(fd, std::memory_order_relaxed);
  if (fd < 0) FERRY_LOG(warn, "log", "cannot open FERRY_LOG_FILE=%s: %s; logging to stderr", c.log_file.c_str(), strerror(errno));
}

void reopen_after_fork(const Config& c, long pid) noexcept {
  if (c.log_file.find("%p") == std::string::npos) return;
  int old = g_fd.exchange(-1);
  if (old >= 0) real.close(old);
  open(c, pid);
}

int private_fd() noexcept { return g_fd.load(std::memory_order_relaxed); }

void move_private_fd() noexcept {
  int old = g_fd.load();
  if (old < 0) return;
  int moved = real.fcntl(old, F_DUPFD_CLOEXEC, old + 1);
  if (moved < 0) moved = real.fcntl(old, F_DUPFD_CLOEXEC, 3);
  g_fd.store(moved);
  real.close(old);
}

}  // namespace ferry::log
