#include "core/base/deferral.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

namespace ferry::deferral {

thread_local constinit uint32_t t_locks = 0;
thread_local constinit uint64_t t_put_off = 0;
thread_local constinit uint32_t t_locks_before_fork = 0;

void put_off(int sig, const void* info, void* ctx) noexcept {
  const int saved = errno;
  // Blocked from the handler's return on: the kernel restores the interrupted
  // context's mask. Queued again now, it stays pending.
  sigaddset(&static_cast<ucontext_t*>(ctx)->uc_sigmask, sig);
  // Blocked in this handler too: with SA_NODEFER it is not, and the signal queued
  // again would come back at once, into this handler, for ever.
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_BLOCK, &only, nullptr);
  t_put_off |= uint64_t{1} << (sig - 1);
  queue_again(sig, info);
  errno = saved;
}

void queue_again(int sig, const void* info) noexcept {
  const int saved = errno;
  if (syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, info) != 0)
    syscall(SYS_tgkill, getpid(), gettid(), sig);  // the signal still comes, without its details
  errno = saved;
}

void after_fork_child() noexcept {
  t_locks = t_locks_before_fork;
  if (t_locks == 0 && t_put_off != 0) deliver();
}

void deliver() noexcept {
  const uint64_t due = t_put_off;
  t_put_off = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  sigset_t set;
  sigemptyset(&set);
  for (int sig = 1; sig <= 64; ++sig)
    if (due & (uint64_t{1} << (sig - 1))) sigaddset(&set, sig);
  const int saved = errno;
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // the kernel delivers them here
  errno = saved;
}

}  // namespace ferry::deferral
