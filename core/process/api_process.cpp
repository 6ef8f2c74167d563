#include "core/api/api.h"

#include "core/base/log.h"
#include "core/base/sandbox.h"
#include "core/base/tcp_only.h"
#include "core/conn/handoff.h"
#include "core/conn/poller.h"
#include "core/conn/upgrade.h"
#include "core/process/runtime.h"

#include <linux/seccomp.h>
#include <sys/prctl.h>

namespace ferry::api {

// glibc's fork runs ferry's pthread_atfork handlers (core/process/forking.h), as it does for
// its own forks (daemon(), and a library's fork): the child inherits every kernel
// socket as is, keeps connections that were still upgrading on TCP, gets its own log
// and counters, and makes its RDMA connections with its own rdma_cm channel and device
// contexts.
long fork() noexcept {
  const long r = sys(real.fork());
  if (r < 0) handoff::fork_failed();
  return r;
}

// Upgraded connections whose descriptors survive an exec go back to kernel TCP first
// (core/conn/handoff.h): the new program, under ferry or not, cannot reach this one's RDMA
// side. If the exec then fails, they stay on TCP. The others (close-on-exec, or closed
// already) put what was sent into the peer's ring first, as at an exit: the poller
// and the send queues end with this program's image. FERRY_STATS prints the counters
// so far, as at an exit, unless nothing was counted: the new program's ferry counts
// afresh.
void before_exec() {
  handoff::before_exec();
  upgrade::flush_at_exit();
  runtime::finish_before_exec();
}

// Before a filter: the process's upgraded connections go back to TCP, what was queued
// reaches the kernel, and ferry carries nothing new (core/base/sandbox.h). Whether or not
// the filter then goes in: a program that tried is one that means to.
void before_seccomp(long op) noexcept {
  if (op != SECCOMP_SET_MODE_STRICT && op != SECCOMP_SET_MODE_FILTER) return;
  if (sandbox::on()) return;
  handoff::all_back();
  upgrade::flush_at_exit();
  sandbox::enter();
  FERRY_LOG(info, "runtime", "a system-call filter: passthrough from here on");
}

// Before an io_uring instance or a change of credentials (core/base/tcp_only.h): the
// process's upgraded connections go back to TCP, and its new ones stay there.
void before_io_uring() noexcept {
  if (!tcp_only::enter(tcp_only::io_uring)) return;
  FERRY_LOG(info, "runtime", "an io_uring instance: connections go on over TCP");
  handoff::all_back();
}

void before_credentials() noexcept {
  // Nothing opened yet: whatever ferry opens from here on has the new credentials.
  if (sandbox::on() || !poller::running() || (tcp_only::why() & tcp_only::credentials)) return;
  if (!tcp_only::enter(tcp_only::credentials)) return;
  FERRY_LOG(info, "runtime", "a change of credentials: connections go on over TCP");
  handoff::all_back();
}

long prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5) noexcept {
  if (option == PR_SET_SECCOMP)
    before_seccomp(a2 == SECCOMP_MODE_STRICT ? SECCOMP_SET_MODE_STRICT : SECCOMP_SET_MODE_FILTER);
  return sys(real.prctl(option, a2, a3, a4, a5));
}

long execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  before_exec();
  return sys(real.execve(path, argv, envp));
}

long execv(const char* path, char* const argv[]) noexcept {
  before_exec();
  return sys(real.execv(path, argv));
}

long execvp(const char* file, char* const argv[]) noexcept {
  before_exec();
  return sys(real.execvp(file, argv));
}

long execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  before_exec();
  return sys(real.execvpe(file, argv, envp));
}

long execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) noexcept {
  before_exec();
  return sys(real.execveat(dirfd, path, argv, envp, flags));
}

long fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  before_exec();
  return sys(real.fexecve(fd, argv, envp));
}

}  // namespace ferry::api
