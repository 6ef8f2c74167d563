// The upgrade of a TCP connection to RDMA, out of band: the client resolves an rdma_cm
// route to the TCP peer and sends a connect request naming the TCP connection; the
// server, which also listens with rdma_cm on its TCP address and port, matches it to
// an accepted socket (holding an early request until the program accepts), and both
// cut over at a byte offset. Anything that fails leaves the connection on TCP, counted
// with its reason. See docs/design.md.
#pragma once

#include "core/base/fork_path.h"
#include "core/conn/socket.h"

#include <rdma/rdma_cma.h>

namespace ferry::upgrade {

// Program threads, right after the kernel call succeeded.
void client_connected(int fd, const SocketRef& s) noexcept;
void server_listening(int fd, const SocketRef& s) noexcept;
// `foreign`: accepted on a listener another process of the tree opened (core/conn/claims.h).
void server_accepted(int fd, const SocketRef& s, bool foreign) noexcept;
// A thread is about to sleep on the link's signal while its handshake runs: the
// poller's one-shot watch of the TCP side, if an arrival disarmed it, is re-armed, so
// that the next arrival (or one already there) wakes the thread.
void watch_for_sleeper(Link& link) noexcept;
// The program read a server connection's TCP bytes while its handshake runs: the wait
// for the peer's request is limited from now on, if the poller's watch has not seen
// bytes yet (it misses those the program takes before it looks).
void peer_spoke(const std::shared_ptr<Link>& link) noexcept;
// The program's first data call on fd, an upgrading socket: the upgrade may commit now
// (see Link::arm); in a forked child, one its parent never used starts here.
void first_data_call(int fd, Socket& s) noexcept;
// The program is about to close (or dup2 over) fd, a descriptor of s; `last`: the last
// one (the kernel's close then ends the connection). After handoff::closing, which
// hands a connection a forked child may hold to TCP first.
void closing(int fd, Socket& s, bool last = false) noexcept;
// The program let go of its last descriptor for s: flush, tell the peer, tear down.
void release(Socket& s) noexcept;
// The process exits (exit(), _exit): waits until every connection of its own has put
// what the program sent into the peer's ring (the send queue drained, every write
// completed), as kernel TCP delivers a socket's bytes after its process is gone,
// those the program closed included. Gives up on a connection that makes no progress
// for 10 s. Free when the process has no poller.
FERRY_FORK_PATH void flush_at_exit() noexcept;
// The same, async-signal-safe, without the warning: for a signal that is about to end
// the process (core/base/signals.h).
void flush_at_signal() noexcept;
// In a forked child: no thread of its waits in either.
FERRY_FORK_PATH void flush_after_fork_child() noexcept;
// The connection leaves this program's hands (core/conn/handoff.h): if its upgrade never
// began (no data call yet), it stays on TCP for good. True then.
bool forgo(Socket& s) noexcept;
// fd, a server connection not used yet, is about to be passed to another process
// (SCM_RIGHTS): the claims table of this process tree says so, so that a receiver of
// the tree serves it over RDMA (passed_in). Then forgo() keeps this copy on TCP.
void passing(int fd, Socket& s) noexcept;
// fd, a connection just received from another process: one that a process of this tree
// passed before its first data call upgrades here, as a worker's accepted connection
// would (claimed at the first data call; the listening process redirects the request).
void passed_in(int fd, const SocketRef& s) noexcept;

// In a forked child: connections the parent had not used yet upgrade again at the
// child's first data call; others still upgrading stay on TCP here; upgraded ones
// cannot be used by the child (their RDMA resources belong to the parent).
void before_fork() noexcept;
FERRY_FORK_PATH void after_fork_child() noexcept;

}  // namespace ferry::upgrade
