// Connections leaving this program: a descriptor kept across exec, or sent to another
// process with SCM_RIGHTS. Whoever uses the socket next may not be ferry, or not this
// ferry, and cannot reach this process's RDMA side, so each upgraded connection among
// them goes back to kernel TCP first (handoff::to_tcp), with the peer resending what
// this side had not read, and the socket is plain TCP from then on, in every process
// that holds it. A connection whose upgrade never began stays on TCP for good.
//
// A forked child shares its parent's connections, but not its queue pairs. When a
// process forks, its upgraded connections go on a hand-over board, memory shared with
// its descendants. A child's first use of one asks the owner (a word on the board and
// a kick of the owner's eventfd); the owner's poller hands it over on a thread of its
// own and says so on the board, and the child then uses the kernel socket. The owner
// hands a connection on the board over when it closes a descriptor of it or exits
// (a child may still hold it, and its peer must not see the stream end).
#pragma once

#include "core/base/fork_path.h"
#include "core/conn/socket.h"

#include <sys/socket.h>

namespace ferry::handoff {

// Before exec: every upgraded connection whose descriptor survives it (no FD_CLOEXEC).
void before_exec() noexcept;
// Every upgraded connection of the process: before a system-call filter
// (core/base/sandbox.h), an io_uring instance or a change of credentials
// (core/base/tcp_only.h).
void all_back() noexcept;
// Before sendmsg: the TCP sockets among msg's SCM_RIGHTS descriptors.
void before_passing(const msghdr* msg) noexcept;

// In the forking process, before the fork: its upgraded connections go on its board.
void before_fork() noexcept;
// In the parent, after the fork (or a failed one: fork_failed() then uncounts the child
// that never was); in the child, whose inherited board is its parent's (its own is made
// at its own fork) and who counts as a holder on the boards of what it inherited.
void after_fork_parent() noexcept;
void fork_failed() noexcept;
FERRY_FORK_PATH void after_fork_child() noexcept;
// A descendant's first use of a connection an ancestor upgraded (Link::orphaned): true
// once the owner handed it over and the socket is kernel TCP here.
bool ask_owner(Socket& s) noexcept;
// Whether ferry carries s's calls: it is not on kernel TCP, counting an inherited
// connection the owner hands over now (ask_owner) as kernel TCP.
bool carried(Socket& s) noexcept;
// The owner is about to close a descriptor of s: a connection on its board is handed
// over first.
void closing(int fd, Socket& s) noexcept;
// The process is exiting: an owner hands over every connection on its board while a
// descendant may hold one; a descendant stops counting as a holder.
FERRY_FORK_PATH void at_exit() noexcept;

// Moves the connection back to kernel TCP before it leaves this program (exec,
// SCM_RIGHTS): the peer resends what this side did not read, with no header, and this
// side's backlog goes out first, so whoever reads or writes the socket next sees the
// plain stream. Waits for an upgrade in flight to settle and for the backlog to reach
// the kernel. 0; -ENOTCONN when the connection was already going back to TCP or its
// RDMA side is dead (nothing done); another -errno when it could not be done intact
// (the connection is reset).
long to_tcp(int fd, Socket& s) noexcept;

}  // namespace ferry::handoff
