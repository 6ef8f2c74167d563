// fork, vfork, and ferry's own start and exit.
#include "preload/export.h"

#include "core/runtime.h"

__attribute__((constructor(101))) static void ferry_start() { ferry::runtime::start(); }
__attribute__((destructor)) static void ferry_finish() { ferry::runtime::finish(); }

FERRY_EXPORT pid_t fork() {
  return FERRY_RESULT(pid_t, fork());
}

// A vfork child shares the parent's memory and stack, which no wrapper can return
// into safely; POSIX lets vfork behave as fork, so it does.
FERRY_EXPORT pid_t vfork() {
  return FERRY_RESULT(pid_t, fork());
}
