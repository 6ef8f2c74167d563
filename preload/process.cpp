// fork, vfork, _exit, and ferry's own start and exit.
#include "preload/export.h"

#include "core/api/api.h"
#include "core/base/fork_path.h"
#include "core/base/libc.h"
#include "core/base/sandbox.h"
#include "core/conn/handoff.h"
#include "core/conn/upgrade.h"
#include "core/process/runtime.h"

#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((constructor(101))) static void ferry_start() { ferry::runtime::start(); }
// An exiting process hands over the connections a forked child may still hold
// (core/conn/handoff.h), lets the others put what the program sent into the peer's ring
// (core/conn/upgrade.h), then prints its counters.
__attribute__((destructor)) FERRY_FORK_PATH static void ferry_finish() {
  if (ferry::sandbox::on()) return;  // nothing the filter may not allow (core/base/sandbox.h)
  ferry::handoff::at_exit();
  ferry::upgrade::flush_at_exit();
  ferry::runtime::finish();
}

// The library's DT_FINI (linked with -fini=ferry_fini): the dynamic linker calls it at
// every exit, and the C runtime's own _fini lies alone past the end of the text, one
// more page for an exiting child to fault in. Destructors run from .fini_array.
extern "C" FERRY_FORK_PATH __attribute__((visibility("hidden"), used)) void ferry_fini() {}

FERRY_EXPORT FERRY_FORK_PATH pid_t fork() {
  return FERRY_RESULT(pid_t, fork());
}

// A vfork child shares the parent's memory and stack, which no wrapper can return
// into safely; POSIX lets vfork behave as fork, so it does.
FERRY_EXPORT pid_t vfork() {
  return FERRY_RESULT(pid_t, fork());
}

// A process that ends with _exit (a forked worker: python's os._exit, many servers'
// children) runs no destructors: FERRY_STATS still prints its counters. Then what
// glibc's _exit does, the exit_group system call.
FERRY_EXPORT FERRY_FORK_PATH void _exit(int status) {
  if (!ferry::sandbox::on()) {
    ferry::handoff::at_exit();
    ferry::upgrade::flush_at_exit();
    ferry::runtime::finish();
  }
  for (;;) ferry::real.syscall(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

FERRY_EXPORT void _Exit(int status) { _exit(status); }

// A system-call filter about to be installed (core/base/sandbox.h): prctl's
// PR_SET_SECCOMP, and the seccomp system call as libseccomp makes it, through syscall();
// and an io_uring instance created through syscall() (core/base/tcp_only.h).
// Both take their arguments as libc's do: up to four (prctl) or six (syscall) words.
FERRY_EXPORT int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a[4];
  for (unsigned long& x : a) x = va_arg(ap, unsigned long);
  va_end(ap);
  return FERRY_RESULT(int, prctl(option, a[0], a[1], a[2], a[3]));
}

FERRY_EXPORT FERRY_FORK_PATH long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_seccomp) ferry::api::before_seccomp(a[0]);
  if (number == SYS_io_uring_setup) ferry::api::before_io_uring();  // core/base/tcp_only.h
  return ferry::real.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
