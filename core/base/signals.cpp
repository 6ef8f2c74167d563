#include "core/base/signals.h"

#include "core/base/libc.h"

#include <errno.h>
#include <pthread.h>

#include <atomic>

namespace ferry::signals {

namespace {

// What a signal that ends the process waits for first (arm()).
std::atomic<void (*)() noexcept> g_flush{nullptr};

constexpr int kManaged[] = {SIGHUP, SIGINT, SIGPIPE, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2};

bool managed(int sig) {
  for (int m : kManaged)
    if (m == sig) return true;
  return false;
}

std::atomic<bool> g_armed{false};  // set under g_lock
// Under g_lock. ours[sig]: ferry's handler is in the kernel, standing in for the
// program's SIG_DFL, whose flags and mask are in view[sig].
FERRY_FORK_DATA std::atomic_flag g_lock = ATOMIC_FLAG_INIT;  // a forked child reads it
bool g_ours[NSIG];
struct sigaction g_view[NSIG];

// g_lock, with every signal blocked in this thread meanwhile: a handler that calls
// sigaction cannot interrupt the holder.
class Guard {
 public:
  Guard() noexcept {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved_);
    while (g_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~Guard() {
    g_lock.clear(std::memory_order_release);
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }

 private:
  sigset_t saved_;
};

bool is_default(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction == nullptr : a.sa_handler == SIG_DFL;
}

void on_signal(int sig);

// Under g_lock: ferry's handler in the kernel for sig, the program's SIG_DFL `as` kept.
int stand_in(int sig, const struct sigaction& as) {
  struct sigaction ours {};
  ours.sa_handler = on_signal;
  sigfillset(&ours.sa_mask);
  ours.sa_flags = SA_RESTART;
  const int r = real.sigaction(sig, &ours, nullptr);
  if (r == 0) {
    g_view[sig] = as;
    g_ours[sig] = true;
  }
  return r;
}

// Under g_lock: the program's disposition back in the kernel.
void step_aside(int sig) {
  if (!g_ours[sig]) return;
  real.sigaction(sig, &g_view[sig], nullptr);
  g_ours[sig] = false;
}

// The signal came while the program's disposition was SIG_DFL: the process dies of
// it, whatever the program sets meanwhile (without ferry it would be dead already).
void on_signal(int sig) {
  const int saved = errno;
  if (void (*flush)() noexcept = g_flush.load(std::memory_order_acquire)) flush();
  // The table's lock is kept to the end: no thread sets SIG_IGN or a handler between
  // SIG_DFL and the raise. Every signal is blocked in this handler already.
  while (g_lock.test_and_set(std::memory_order_acquire)) {
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  real.sigaction(sig, &dfl, nullptr);
  g_ours[sig] = false;
  // Delivered at once, here: the thread's own mask (restored at the handler's return)
  // may block it, as during sigsuspend or ppoll with a mask that let it through.
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  raise(sig);
  g_lock.clear(std::memory_order_release);  // not reached: the default action ends the process
  errno = saved;
}

}  // namespace

void arm(void (*flush)() noexcept) noexcept {
  g_flush.store(flush, std::memory_order_release);
  if (g_armed.load(std::memory_order_relaxed)) return;
  Guard g;
  if (g_armed.load(std::memory_order_relaxed)) return;
  for (int sig : kManaged) {
    struct sigaction cur {};
    if (real.sigaction(sig, nullptr, &cur) == 0 && is_default(cur)) stand_in(sig, cur);
  }
  g_armed.store(true, std::memory_order_relaxed);
}

int sigaction(int sig, const struct sigaction* act_in, struct sigaction* old) noexcept {
  if (!managed(sig)) return real.sigaction(sig, act_in, old);
  // Under the lock even before arm(), which reads and replaces the kernel's disposition.
  Guard g;
  if (!g_armed.load(std::memory_order_relaxed)) return real.sigaction(sig, act_in, old);
  struct sigaction copy;
  const struct sigaction* act = nullptr;
  if (act_in) {
    copy = *act_in;  // before *old is written: they may be the same
    act = &copy;
  }
  if (!g_ours[sig]) {
    if (!act || !is_default(*act)) return real.sigaction(sig, act, old);
    // SIG_DFL again: ferry's handler stands in once more.
    struct sigaction prev {};
    if (real.sigaction(sig, nullptr, &prev) != 0) return -1;
    if (stand_in(sig, *act) != 0) return real.sigaction(sig, act, old);
    if (old) *old = prev;
    return 0;
  }
  if (old) *old = g_view[sig];
  if (!act) return 0;
  if (is_default(*act)) {
    g_view[sig] = *act;
    return 0;
  }
  const int r = real.sigaction(sig, act, nullptr);
  if (r == 0) g_ours[sig] = false;
  return r;
}

sighandler_t signal(int sig, sighandler_t handler, bool sysv) noexcept {
  if (handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction act {}, old {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (sysv) {
    act.sa_flags = SA_RESETHAND | SA_NODEFER;
  } else {
    if (sig > 0 && sig < NSIG) sigaddset(&act.sa_mask, sig);
    act.sa_flags = SA_RESTART;
  }
  if (signals::sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

FERRY_FORK_PATH void after_fork_child() noexcept {
  if (g_lock.test(std::memory_order_relaxed)) g_lock.clear(std::memory_order_relaxed);  // a page written only then
}

void release(int sig) noexcept {
  if (!managed(sig)) return;
  Guard g;
  step_aside(sig);
}

}  // namespace ferry::signals
