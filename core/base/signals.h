// Signals that end a process by default, with the program's bytes still on their way.
//
// Kernel TCP delivers what a process sent after a signal kills it: the socket's buffers
// belong to the kernel. Under ferry, what the program sent may still be in the
// process (the send queue, writes not yet completed), so a process ended by SIGTERM or
// SIGINT would take it along, and its peer would read a stream cut short and an
// orderly end. Once a connection of the process is on RDMA (arm()), ferry puts a
// handler of its own in place of the default action of the signals that end a process
// without a core dump and that programs are stopped with or die of (SIGHUP, SIGINT,
// SIGPIPE, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2): it waits for the poller to put what is
// queued into the peer's ring (arm()'s flush, upgrade::flush_at_signal, at most 10 s without
// progress), restores the default and raises the signal again, unblocked, so the
// process dies of it as it would have (whatever the program set meanwhile: without
// ferry it would be dead).
//
// A handler the program installs for a signal that does not come from its own
// instruction (not a fault, a trap or abort) is called through ferry's relay, which
// puts the signal off while the thread holds a lock of ferry's (core/base/deferral.h);
// the kernel holds the program's mask and flags for the relay. A handler with
// SA_RESETHAND (sysv_signal) goes to the kernel as it is.
//
// The program sees none of it: sigaction, signal, bsd_signal and sysv_signal report and
// set the disposition the program chose (SIG_DFL while ferry's handler stands in for
// it, its own handler while the relay calls it). sigset, sigignore and siginterrupt,
// which libc carries out without sigaction, first hand the signal back to the kernel as
// the program left it, and ferry takes up what libc set afterwards (adopt).
//
// A program that writes to a connection or pipe its peer left dies of SIGPIPE; what it
// sent on its other connections still arrives, as with kernel TCP. ferry's own sends
// raise SIGPIPE (core/api/stream.cpp) with the socket's send lock let go, and the flush
// only tries the channels' locks.
//
// Not covered: SIGKILL (no code runs), and signals that dump core (the process is
// crashing).
#pragma once

#include "core/base/fork_path.h"

#include <signal.h>

namespace ferry::signals {

// Any thread, at the first upgraded connection of the process; again is free. `flush`
// runs in the handler before the process dies of the signal (upgrade::flush_at_signal).
void arm(void (*flush)() noexcept) noexcept;

// The exports' work. Each returns libc's result (-1 and errno on failure).
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept;
// signal (BSD semantics: SA_RESTART, the signal blocked in its handler) and sysv_signal
// (SA_RESETHAND | SA_NODEFER): the previous handler, or SIG_ERR.
sighandler_t signal(int sig, sighandler_t handler, bool sysv) noexcept;
// In a forked child: a lock another thread of the parent held is free.
FERRY_FORK_PATH void after_fork_child() noexcept;
// Before libc's sigset, sigignore or siginterrupt: the kernel holds the program's disposition.
void release(int sig) noexcept;
// After them: what libc put in the kernel, carried as sigaction would carry it.
void adopt(int sig) noexcept;

}  // namespace ferry::signals
