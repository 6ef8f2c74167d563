#include "core/base/signals.h"

#include "core/base/libc.h"
#include "core/base/lock.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ferry::signals {
namespace {

void program_handler(int) {}

sighandler_t kernel_has(int sig) {
  struct sigaction cur {};
  real.sigaction(sig, nullptr, &cur);
  return cur.sa_handler;
}

sighandler_t program_sees(int sig) {
  struct sigaction cur {};
  signals::sigaction(sig, nullptr, &cur);
  return cur.sa_handler;
}

// Runs body in a forked child (arm() cannot be undone) and returns its wait status.
template <class F>
int in_child(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

#define CHILD_EXPECT(cond, code) \
  if (!(cond)) _exit(code)

// A program's handler is called through ferry's relay (core/base/deferral.h): the
// kernel holds neither it nor a default.
bool relayed(int sig) {
  const sighandler_t k = kernel_has(sig);
  return k != SIG_DFL && k != SIG_IGN && k != program_handler;
}

TEST(Signals, BeforeArmOnlyHandlersAreRelayed) {
  int status = in_child([] {
    signals::signal(SIGTERM, program_handler, false);
    CHILD_EXPECT(relayed(SIGTERM), 10);
    CHILD_EXPECT(program_sees(SIGTERM) == program_handler, 11);
    signals::signal(SIGTERM, SIG_DFL, false);
    CHILD_EXPECT(kernel_has(SIGTERM) == SIG_DFL, 12);
    signals::signal(SIGTERM, SIG_IGN, false);
    CHILD_EXPECT(kernel_has(SIGTERM) == SIG_IGN, 13);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// Once armed, the kernel holds ferry's handler where the program has SIG_DFL, and the
// program sees only what it set.
TEST(Signals, TheProgramSeesItsOwnDispositions) {
  int status = in_child([] {
    signals::signal(SIGUSR1, SIG_IGN, false);
    arm(nullptr);
    CHILD_EXPECT(program_sees(SIGTERM) == SIG_DFL, 10);
    CHILD_EXPECT(kernel_has(SIGTERM) != SIG_DFL && kernel_has(SIGTERM) != SIG_IGN, 11);
    CHILD_EXPECT(kernel_has(SIGUSR1) == SIG_IGN, 12);   // not the default: left alone
    CHILD_EXPECT(kernel_has(SIGQUIT) == SIG_DFL, 13);   // dumps core: not taken
    // A handler of the program's replaces ferry's stand-in by the relay; SIG_DFL
    // brings the stand-in back.
    CHILD_EXPECT(signals::signal(SIGTERM, program_handler, false) == SIG_DFL, 14);
    CHILD_EXPECT(relayed(SIGTERM), 15);
    CHILD_EXPECT(program_sees(SIGTERM) == program_handler, 16);
    CHILD_EXPECT(signals::signal(SIGTERM, SIG_DFL, false) == program_handler, 17);
    CHILD_EXPECT(program_sees(SIGTERM) == SIG_DFL, 18);
    CHILD_EXPECT(kernel_has(SIGTERM) != SIG_DFL, 19);
    // The flags and mask the program gave SIG_DFL come back as it gave them.
    struct sigaction act {}, old {};
    act.sa_handler = SIG_DFL;
    act.sa_flags = SA_RESETHAND;
    sigemptyset(&act.sa_mask);
    sigaddset(&act.sa_mask, SIGUSR2);
    CHILD_EXPECT(signals::sigaction(SIGINT, &act, nullptr) == 0, 20);
    CHILD_EXPECT(signals::sigaction(SIGINT, nullptr, &old) == 0, 21);
    CHILD_EXPECT(old.sa_handler == SIG_DFL && (old.sa_flags & SA_RESETHAND) && sigismember(&old.sa_mask, SIGUSR2), 22);
    // sysv_signal's one-shot flags reach the kernel with the program's handler.
    signals::signal(SIGHUP, program_handler, true);
    struct sigaction k {};
    real.sigaction(SIGHUP, nullptr, &k);
    CHILD_EXPECT(k.sa_handler == program_handler && (k.sa_flags & SA_RESETHAND) && (k.sa_flags & SA_NODEFER), 23);
    // Before sigset and siginterrupt the kernel gets the program's disposition back.
    release(SIGALRM);
    CHILD_EXPECT(kernel_has(SIGALRM) == SIG_DFL, 24);
    CHILD_EXPECT(program_sees(SIGALRM) == SIG_DFL, 25);
    // The new action read before the old one is written, where both are one struct.
    struct sigaction both {};
    both.sa_handler = program_handler;
    CHILD_EXPECT(signals::sigaction(SIGUSR2, &both, &both) == 0, 28);
    CHILD_EXPECT(both.sa_handler == SIG_DFL && relayed(SIGUSR2), 29);
    // A fault's handler is the kernel's to call: it is never put off.
    signals::signal(SIGSEGV, program_handler, false);
    CHILD_EXPECT(kernel_has(SIGSEGV) == program_handler, 31);
    CHILD_EXPECT(signals::signal(SIGUSR2, SIG_ERR, false) == SIG_ERR && errno == EINVAL, 30);
    // Signals ferry never takes, and bad numbers, are libc's.
    CHILD_EXPECT(signals::sigaction(0, nullptr, &old) == -1 && errno == EINVAL, 26);
    CHILD_EXPECT(signals::signal(SIGKILL, program_handler, false) == SIG_ERR, 27);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status);
}

// SIGPIPE too: once armed, ferry's handler stands in for its default, and a write to a
// pipe nobody reads still ends the process of SIGPIPE.
TEST(Signals, ABrokenPipeStillEndsTheProcessOfSIGPIPE) {
  int status = in_child([] {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    real.sigaction(SIGPIPE, &dfl, nullptr);
    arm(nullptr);
    CHILD_EXPECT(kernel_has(SIGPIPE) != SIG_DFL, 10);
    CHILD_EXPECT(program_sees(SIGPIPE) == SIG_DFL, 11);
    int p[2];
    CHILD_EXPECT(pipe(p) == 0, 12);
    close(p[0]);
    (void)!write(p[1], "x", 1);
    _exit(99);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) << status;
}

// A signal whose default ends the process still ends it, of that signal.
TEST(Signals, ADefaultSignalStillEndsTheProcessOfThatSignal) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR2}) {
    int status = in_child([sig] {
      arm(nullptr);
      raise(sig);
      _exit(99);
    });
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << sig << " " << status;
  }
  // Set to SIG_DFL again after a handler: the same.
  int status = in_child([] {
    arm(nullptr);
    signals::signal(SIGTERM, program_handler, false);
    signals::signal(SIGTERM, SIG_DFL, false);
    kill(getpid(), SIGTERM);
    _exit(99);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  // Delivered inside sigsuspend, whose mask let it through while the thread's own
  // blocks it: still the end of the process, not a signal left pending.
  status = in_child([] {
    arm(nullptr);
    sigset_t term, none;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigemptyset(&none);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
    kill(getpid(), SIGTERM);
    sigsuspend(&none);
    _exit(99);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  // Ignored: not at all.
  status = in_child([] {
    arm(nullptr);
    signals::signal(SIGTERM, SIG_IGN, false);
    raise(SIGTERM);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A signal that comes while the thread holds a lock of ferry's waits until the thread
// lets go of its last one, and then comes with its own details.
volatile sig_atomic_t g_calls, g_value, g_code;
void counting(int, siginfo_t* info, void*) {
  g_calls = g_calls + 1;
  g_value = info->si_value.sival_int;
  g_code = info->si_code;
}

TEST(Deferral, ASignalWaitsForTheLastLockLetGo) {
  int status = in_child([] {
    struct sigaction act {};
    act.sa_sigaction = counting;
    act.sa_flags = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    CHILD_EXPECT(signals::sigaction(SIGUSR1, &act, nullptr) == 0, 10);
    Lock outer, inner;
    outer.lock();
    sigval v{};
    v.sival_int = 42;
    CHILD_EXPECT(sigqueue(getpid(), SIGUSR1, v) == 0, 11);
    CHILD_EXPECT(g_calls == 0, 12);  // put off
    inner.lock();
    inner.unlock();
    CHILD_EXPECT(g_calls == 0, 13);  // one lock still held
    outer.unlock();
    CHILD_EXPECT(g_calls == 1 && g_value == 42 && g_code == SI_QUEUE, 14);
    // Not blocked any more: the next one comes at once.
    raise(SIGUSR1);
    CHILD_EXPECT(g_calls == 2, 15);
    // A standard signal that comes twice while put off comes once, as when blocked.
    outer.lock();
    raise(SIGUSR1);
    raise(SIGUSR1);
    outer.unlock();
    CHILD_EXPECT(g_calls == 3, 16);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status);
}

// SA_NODEFER leaves the signal unblocked in its handler: put off, it still waits.
TEST(Deferral, ANoDeferHandlerIsPutOffOnce) {
  int status = in_child([] {
    struct sigaction act {};
    act.sa_sigaction = counting;
    act.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&act.sa_mask);
    CHILD_EXPECT(signals::sigaction(SIGUSR1, &act, nullptr) == 0, 10);
    g_calls = 0;
    Lock lock;
    lock.lock();
    raise(SIGUSR1);
    CHILD_EXPECT(g_calls == 0, 11);
    lock.unlock();
    CHILD_EXPECT(g_calls == 1, 12);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status) << " " << status;
}

// A handler that jumps out (siglongjmp, as iperf3's on SIGINT) cannot leave a lock
// held: it runs once the lock is let go.
sigjmp_buf g_back;
void jumping(int) { siglongjmp(g_back, 1); }

TEST(Deferral, AHandlerThatJumpsOutLeavesNoLockHeld) {
  int status = in_child([] {
    signals::signal(SIGUSR2, jumping, false);
    static Lock lock;
    static volatile int jumped = 0;
    if (sigsetjmp(g_back, 1) == 0) {
      lock.lock();
      raise(SIGUSR2);
      CHILD_EXPECT(jumped == 0, 10);  // still here: put off
      lock.unlock();
      _exit(11);  // not reached: the handler jumped
    }
    jumped = 1;
    CHILD_EXPECT(lock.try_lock(), 12);
    lock.unlock();
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status);
}

// Nor a count taken around a system call inside a Stretch (no lock held): the handler
// jumps out once the count is given back.
TEST(Deferral, AHandlerThatJumpsOutOfAStretchLeavesNoCountTaken) {
  int status = in_child([] {
    signals::signal(SIGUSR2, jumping, false);
    static std::atomic<int> users{0};
    if (sigsetjmp(g_back, 1) == 0) {
      deferral::Stretch stretch;
      users.fetch_add(1);
      raise(SIGUSR2);
      users.fetch_sub(1);
    }
    CHILD_EXPECT(users.load() == 0, 10);
    CHILD_EXPECT(deferral::t_locks == 0, 11);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status);
}

// A fork's prepare handler takes locks (core/process/forking.cpp: the channels', the
// epoll sets') that the child counts as free, held by its parent's threads; the child's
// count of them must go too, or every signal its program handles waits for good (an
// rsync client's receiver never got the SIGUSR2 its generator ends it with).
TEST(Deferral, AForkedChildHoldsNoneOfTheLocksItsParentTookForTheFork) {
  int status = in_child([] {
    struct sigaction act {};
    act.sa_sigaction = counting;
    act.sa_flags = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    CHILD_EXPECT(signals::sigaction(SIGUSR2, &act, nullptr) == 0, 10);
    g_calls = 0;
    static Lock lock;
    deferral::before_fork();  // as prepare(), then its lock
    lock.lock();
    raise(SIGUSR2);  // put off in the parent: pending there, blocked in the forking thread
    // The kernel's fork alone: the handlers are the ones above and below (ferry's own,
    // if this test process has them, would count this lock as one before the fork).
    const pid_t pid = static_cast<pid_t>(syscall(SYS_fork));
    if (pid == 0) {
      deferral::after_fork_child();  // as child()
      if (deferral::t_locks != 0) _exit(1);
      if (g_calls != 0) _exit(2);  // the parent's pending signal is not the child's
      raise(SIGUSR2);
      _exit(g_calls == 1 ? 0 : 3);
    }
    lock.unlock();  // as parent(): the put-off signal comes now
    CHILD_EXPECT(g_calls == 1, 11);
    int st = 0;
    waitpid(pid, &st, 0);
    CHILD_EXPECT(WIFEXITED(st), 12);
    CHILD_EXPECT(WEXITSTATUS(st) == 0, 20 + WEXITSTATUS(st));
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed check " << WEXITSTATUS(status);
}

// SIGTERM with its default, ferry standing in: the process still dies of it, once the
// lock is let go.
TEST(Deferral, ADefaultSignalEndsTheProcessOnceTheLockIsLetGo) {
  int status = in_child([] {
    arm(nullptr);
    Lock lock;
    lock.lock();
    raise(SIGTERM);
    (void)!write(1, "", 0);
    lock.unlock();
    _exit(99);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
}

}  // namespace
}  // namespace ferry::signals
