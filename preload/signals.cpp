// sigaction and the calls libc builds on it without going through it: the program's
// view of the signals ferry stands in for (core/base/signals.h).
#include "preload/export.h"

#include "core/base/libc.h"
#include "core/base/signals.h"

FERRY_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  return ferry::signals::sigaction(sig, act, old);
}

FERRY_EXPORT int __sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  return ferry::signals::sigaction(sig, act, old);
}

FERRY_EXPORT sighandler_t signal(int sig, sighandler_t handler) { return ferry::signals::signal(sig, handler, false); }

FERRY_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) {
  return ferry::signals::signal(sig, handler, false);
}

FERRY_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) {
  return ferry::signals::signal(sig, handler, true);
}

FERRY_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) {
  return ferry::signals::signal(sig, handler, true);
}

FERRY_EXPORT sighandler_t sigset(int sig, sighandler_t disposition) {
  ferry::signals::release(sig);
  const sighandler_t r = ferry::real.sigset(sig, disposition);
  ferry::signals::adopt(sig);
  return r;
}

FERRY_EXPORT int siginterrupt(int sig, int flag) {
  ferry::signals::release(sig);
  const int r = ferry::real.siginterrupt(sig, flag);
  ferry::signals::adopt(sig);
  return r;
}

FERRY_EXPORT int sigignore(int sig) {
  ferry::signals::release(sig);
  const int r = ferry::real.sigignore(sig);
  ferry::signals::adopt(sig);
  return r;
}
