// An upgraded connection going back to kernel TCP while it runs (failover): when its
// RDMA side fails (a queue pair in error, the peer's rdma_cm side gone without its
// end of stream) or the peer's bytes arrive on TCP past its cutover point (the peer
// went back first). The offsets are core/proto/tcp_resume.h's; the protocol is in
// docs/design.md, "Downgrade".
//
// Each direction goes on its own. Sending: the bytes the peer has not credited (read
// back from the staging area) and the send queue become a backlog, behind a header
// naming their stream offset, written to TCP before any new send. Receiving: TCP's
// bytes up to the peer's cutover point, then the ring until it is empty, then the
// peer's header on TCP and the overlap already read from the ring, dropped; the rest
// is the program's. Once the backlog is out and the header read, the socket is kernel
// TCP again (Transport::kernel).
//
// The steps run in the program's calls on the socket and, for the backlog, on the
// poller thread through ferry's own duplicate of the socket, so a program that is
// elsewhere (or closed its descriptor) still gets its bytes delivered.
#pragma once

#include "core/base/contract.h"
#include "core/conn/link.h"
#include "core/conn/readiness_state.h"
#include "core/conn/socket.h"

#include <sys/uio.h>

namespace ferry::downgrade {

// failed: the RDMA side failed; peer: the peer went back first; handoff: either end
// hands the connection to another program (exec, SCM_RIGHTS), which may not be ferry;
// forged: the RDMA peer could not prove it holds the TCP connection (core/conn/binding.h):
// TCP past the cutover point it named is read as it is, and nothing went into its ring.
enum class Why { failed, peer, handoff, forged };

// Marks the connection for downgrade (once; counted by why) and wakes its waiters.
void want(Link& link, Why why) noexcept;

// Whether a look under the channel's lock finds that the connection must leave RDMA,
// and why: the peer handed it to TCP, or the RDMA side failed, its peer's rdma_cm
// side left, or the send side already left the ring. A peer that left is looked at
// once more first: what it sent before leaving (its hand-off) was acknowledged, so is
// on our completion queue, by the time its rdma_cm side is known gone, but a caller's
// look at the queue may have come before both (a writer whose ring had room).
inline bool leaving_locked(const Link& link, Channel& ch, Why& why) {
  FERRY_HELD(ch.mu());
  const bool gone = ch.failed() || link.peer_gone.load();
  if (gone && !ch.peer_handoff()) ch.poll_all_locked();
  why = ch.peer_handoff() ? Why::handoff : Why::failed;
  return gone || ch.peer_handoff() || link.tx_left.load();
}

// Whether TCP speaks for the connection while the receive side reads the ring past
// the peer's cutover point: bytes wait on it (the peer went back to TCP: why = peer),
// or the kernel's connection ended in error (keepalive or user timeout, a reset: why =
// failed), which ends this one as it ends kernel TCP's. Asks the kernel only when the
// poller saw TCP events since the last look.
bool tcp_took_over(int fd, Link& link, Why& why) noexcept;
// The peer's bytes on TCP may follow its hand-off message, which reached our
// completion queue first (the peer writes its header once the message is confirmed)
// but may not have been looked at yet: `handoff` then, else `why`. Takes the channel's
// lock.
Why confirmed(Link& link, Why why) noexcept;

// A receive's answer when there is nothing to take now.
constexpr long kNothing = -(1L << 40);

// One look at the receive side of a connection marked down, past `got` bytes of iov.
// Needs the socket's rx_mu. Returns bytes (> 0), 0 at the end of the stream, -errno, or
// kNothing.
long look_rx(int fd, Link& link, const iovec* iov, int iovcnt, int flags) noexcept;

// Where the send side stands: how a send continues.
enum class Send { wait, direct, dead };
// Advances the send side (builds and writes the backlog). `err`: with dead, the error
// a send reports (0: EPIPE). `sending`: the program has bytes to send, so a backlog
// that is a header alone goes out now (until then it waits for them).
Send look_tx(int fd, Link& link, int& err, bool sending = false) noexcept;

// A send reported the error look_tx gave with dead: later sends fail with EPIPE, as
// the kernel reports a socket error once.
void error_taken(Link& link) noexcept;

// The connection cannot be handed over intact (core/conn/handoff.h): TCP is reset, as a
// connection whose stream cannot go on.
void give_up(int fd, Link& link, const char* why) noexcept;

// The program shut its sending side: after the backlog, TCP's own shutdown.
long shutdown_write(int fd, Link& link) noexcept;

// Readiness the way kernel TCP would report it, for a connection marked down.
readiness::State state(int fd, Link& link) noexcept;
// Bytes a receive could take now (FIONREAD) and bytes not yet acknowledged (SIOCOUTQ).
long readable(int fd, Link& link) noexcept;
long unsent(int fd, Link& link) noexcept;

// When the backlog is out and the header read: the socket becomes kernel TCP again.
// Call with no lock held.
void finish_if_done(Link& link) noexcept;
// Whether the receive side found TCP ended before the peer's header (its process is
// gone): nothing more will come.
bool ended(Link& link) noexcept;

// The program is about to close fd, a descriptor of a connection marked down: ferry
// keeps its own duplicate, through which the backlog goes out afterwards.
void prepare(int fd, Link& link) noexcept;
// The program let go of its last descriptor: TCP's end follows the backlog (unless
// the connection was passed on: then the kernel ends it with its last descriptor).
void released(Link& link) noexcept;

// The program let go of the socket: whether the backlog is out (or can never be), so
// that the connection can be dropped; looked at by the poller until it is.
bool flushed(Link& link) noexcept;
// Whether bytes of the backlog (more than a header that waits for the program's next
// send) are still to be written to TCP through ferry's duplicate.
bool backlog_waits(Link& link) noexcept;
// Closes ferry's duplicate of the socket (the peer then sees TCP end).
void close_dup(Link& link) noexcept;

}  // namespace ferry::downgrade
