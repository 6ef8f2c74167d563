#include "core/base/signals.h"

#include "core/base/deferral.h"
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

// Signals that a thread's own instruction raises (a fault, a trap, abort): delivered
// at once. Every other one a program handles waits while the thread holds a lock of
// ferry's (core/base/deferral.h).
bool put_off_able(int sig) {
  switch (sig) {
    case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGTRAP: case SIGSYS: case SIGABRT:
    case SIGKILL: case SIGSTOP:
      return false;
    default:
      return sig > 0 && sig < NSIG;
  }
}

// How the kernel carries a signal's disposition for the program:
//   kKernel   as the program set it (or ferry never saw it);
//   kStandIn  ferry's handler (on_signal) stands in for the program's SIG_DFL;
//   kRelay    ferry's handler (relay) puts the signal off or calls the program's.
enum Mode : uint8_t { kKernel, kStandIn, kRelay };

std::atomic<bool> g_armed{false};  // set under g_lock
// Under g_lock. While g_mode[sig] is not kKernel, g_view[sig] is the program's
// disposition (its flags and mask too).
FERRY_FORK_DATA std::atomic_flag g_lock = ATOMIC_FLAG_INIT;  // a forked child reads it
Mode g_mode[NSIG];
struct sigaction g_view[NSIG];

// The program's handler as relay reads it, in any thread, while sigaction may change
// it: a sequence lock (odd while written; written only under g_lock, with every signal
// blocked in the writing thread).
struct Route {
  std::atomic<uint32_t> seq{0};
  std::atomic<uintptr_t> fn{0};
  std::atomic<int> flags{0};
};
Route g_route[NSIG];

void set_route(int sig, uintptr_t fn, int flags) {
  Route& r = g_route[sig];
  r.seq.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.fn.store(fn, std::memory_order_relaxed);
  r.flags.store(flags, std::memory_order_relaxed);
  r.seq.fetch_add(1, std::memory_order_release);
}

void read_route(int sig, uintptr_t& fn, int& flags) {
  Route& r = g_route[sig];
  for (;;) {
    const uint32_t before = r.seq.load(std::memory_order_acquire);
    fn = r.fn.load(std::memory_order_relaxed);
    flags = r.flags.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!(before & 1) && r.seq.load(std::memory_order_relaxed) == before) return;
  }
}

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

uintptr_t handler_of(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) ? reinterpret_cast<uintptr_t>(a.sa_sigaction)
                                   : reinterpret_cast<uintptr_t>(a.sa_handler);
}

bool is_default(const struct sigaction& a) { return handler_of(a) == reinterpret_cast<uintptr_t>(SIG_DFL); }

// A function of the program's, rather than SIG_DFL or SIG_IGN.
bool is_function(uintptr_t fn) {
  return fn != reinterpret_cast<uintptr_t>(SIG_DFL) && fn != reinterpret_cast<uintptr_t>(SIG_IGN);
}

void on_signal(int sig, siginfo_t* info, void* ctx);
void relay(int sig, siginfo_t* info, void* ctx);

// Under g_lock: `as`, the program's disposition for sig, put in the kernel the way
// ferry carries it (Mode).
int install(int sig, const struct sigaction& as) {
  struct sigaction k = as;
  Mode mode = kKernel;
  if (managed(sig) && is_default(as) && g_armed.load(std::memory_order_relaxed)) {
    k = {};
    k.sa_sigaction = on_signal;
    sigfillset(&k.sa_mask);
    k.sa_flags = SA_SIGINFO | SA_RESTART;
    mode = kStandIn;
  } else if (put_off_able(sig) && is_function(handler_of(as)) && !(as.sa_flags & SA_RESETHAND)) {
    // The program's mask and flags, so the kernel treats the relay as it would the
    // program's handler. (SA_RESETHAND would bring back SIG_DFL before a put-off
    // signal comes again: such a handler stays in the kernel.)
    k.sa_sigaction = relay;
    k.sa_flags = as.sa_flags | SA_SIGINFO;
    mode = kRelay;
  }
  if (mode == kRelay) set_route(sig, handler_of(as), as.sa_flags);  // before the kernel can call relay
  if (real.sigaction(sig, &k, nullptr) != 0) {
    if (mode == kKernel || real.sigaction(sig, &as, nullptr) != 0) return -1;
    mode = kKernel;  // the program's own disposition, as ferry could not carry it
  }
  if (mode != kRelay) set_route(sig, 0, 0);
  g_mode[sig] = mode;
  g_view[sig] = as;
  return 0;
}

// Under g_lock: the program's disposition back in the kernel.
void step_aside(int sig) {
  if (g_mode[sig] == kKernel) return;
  real.sigaction(sig, &g_view[sig], nullptr);
  g_mode[sig] = kKernel;
  set_route(sig, 0, 0);
}

// The program's handler, or what the program set instead since the kernel chose the
// relay: then the signal comes again, to the disposition the kernel now holds.
void relay(int sig, siginfo_t* info, void* ctx) {
  if (deferral::holding()) {
    deferral::put_off(sig, info, ctx);
    return;
  }
  uintptr_t fn;
  int flags;
  read_route(sig, fn, flags);
  if (!is_function(fn)) return deferral::queue_again(sig, info);
  if (flags & SA_SIGINFO) {
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(fn)(sig, info, ctx);
  } else {
    reinterpret_cast<void (*)(int)>(fn)(sig);
  }
}

// The signal came while the program's disposition was SIG_DFL: the process dies of
// it, whatever the program sets meanwhile (without ferry it would be dead already).
void on_signal(int sig, siginfo_t* info, void* ctx) {
  if (deferral::holding()) {  // the flush needs this thread's locks: once they are let go
    deferral::put_off(sig, info, ctx);
    return;
  }
  const int saved = errno;
  if (void (*flush)() noexcept = g_flush.load(std::memory_order_acquire)) flush();
  // The table's lock is kept to the end: no thread sets SIG_IGN or a handler between
  // SIG_DFL and the raise. Every signal is blocked in this handler already.
  while (g_lock.test_and_set(std::memory_order_acquire)) {
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  real.sigaction(sig, &dfl, nullptr);
  g_mode[sig] = kKernel;
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
  g_armed.store(true, std::memory_order_relaxed);
  for (int sig : kManaged) {
    struct sigaction cur {};
    if (g_mode[sig] == kKernel && real.sigaction(sig, nullptr, &cur) == 0 && is_default(cur)) install(sig, cur);
  }
}

int sigaction(int sig, const struct sigaction* act_in, struct sigaction* old) noexcept {
  if (!managed(sig) && !put_off_able(sig)) return real.sigaction(sig, act_in, old);
  Guard g;
  struct sigaction copy;
  if (act_in) copy = *act_in;  // before *old is written: they may be the same
  struct sigaction prev {};
  if (g_mode[sig] != kKernel) {
    prev = g_view[sig];
  } else if (real.sigaction(sig, nullptr, &prev) != 0) {
    return -1;
  }
  if (act_in && install(sig, copy) != 0) return -1;
  if (old) *old = prev;
  return 0;
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
  if (!managed(sig) && !put_off_able(sig)) return;
  Guard g;
  step_aside(sig);
}

void adopt(int sig) noexcept {
  if (!managed(sig) && !put_off_able(sig)) return;
  Guard g;
  struct sigaction cur {};
  if (g_mode[sig] == kKernel && real.sigaction(sig, nullptr, &cur) == 0) install(sig, cur);
}

}  // namespace ferry::signals
