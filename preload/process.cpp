// fork, vfork, _exit, and ferry's own start and exit.
#include "preload/export.h"

#include "core/base/fork_path.h"
#include "core/conn/handoff.h"
#include "core/conn/upgrade.h"
#include "core/process/runtime.h"

#include <sys/syscall.h>
#include <unistd.h>

__attribute__((constructor(101))) static void ferry_start() { ferry::runtime::start(); }
// An exiting process hands over the connections a forked child may still hold
// (core/conn/handoff.h), lets the others put what the program sent into the peer's ring
// (core/conn/upgrade.h), then prints its counters.
__attribute__((destructor)) FERRY_FORK_PATH static void ferry_finish() {
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
  ferry::handoff::at_exit();
  ferry::upgrade::flush_at_exit();
  ferry::runtime::finish();
  for (;;) syscall(SYS_exit_group, status);
}

FERRY_EXPORT void _Exit(int status) { _exit(status); }
