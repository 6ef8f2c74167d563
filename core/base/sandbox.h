// System-call filters (seccomp). A process under a filter may be killed by any call the
// filter does not list, and ferry's work for a connection (rdma_cm, verbs, its poller
// thread, its log file) makes calls the program itself never makes. So before a
// program installs a filter (prctl(PR_SET_SECCOMP) or the seccomp system call,
// core/process/api_process.cpp), every upgraded connection of the process goes back to
// kernel TCP (core/conn/handoff.h), and from then on ferry carries nothing new in it or
// its forked children: no upgrade, no poller started, no log line, no counters
// printed. What the program then does on its sockets goes straight to libc, as without
// ferry.
//
// A filter the process was started under (a container's, a systemd unit's
// SystemCallFilter=) is not the program's own sandbox but its environment's, made to let
// it run: ferry works there as anywhere (a rule keeps a program on TCP, ferry.conf(5)).
#pragma once

#include <atomic>

namespace ferry::sandbox {

namespace detail {
extern std::atomic<bool> g_on;
}

// Whether this process is (or is about to be) under a filter. Inherited by a forked child.
inline bool on() noexcept { return detail::g_on.load(std::memory_order_relaxed); }
void enter() noexcept;

}  // namespace ferry::sandbox
