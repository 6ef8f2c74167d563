// Connections leaving this program: a descriptor kept across exec, or sent to another
// process with SCM_RIGHTS. Whoever uses the socket next may not be ferry, or not this
// ferry, and cannot reach this process's RDMA side, so each upgraded connection among
// them goes back to kernel TCP first (stream::hand_off), with the peer resending what
// this side had not read, and the socket is plain TCP from then on, in every process
// that holds it. A connection whose upgrade never began stays on TCP for good.
#pragma once

#include <sys/socket.h>

namespace ferry::handoff {

// Before exec: every upgraded connection whose descriptor survives it (no FD_CLOEXEC).
void before_exec() noexcept;
// Before sendmsg: the TCP sockets among msg's SCM_RIGHTS descriptors.
void before_passing(const msghdr* msg) noexcept;

}  // namespace ferry::handoff
