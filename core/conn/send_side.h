// The send side of an upgraded connection: its switch from TCP to the peer's ring at
// the cutover point (with the client's proof behind it on TCP, core/conn/binding.h), and its
// end (a fin after the queue, or an abortive close).
#pragma once

#include "core/conn/link.h"
#include "core/conn/socket.h"

#include <memory>

namespace ferry::send_side {

// Cuts the send side over to the ring (the first RDMA message names the bytes TCP
// carried). Needs s.tx_mu held and the link established (every kernel send before the
// cutover runs under tx_mu, so tcp_sent is exact). The send queue may then hold what
// kernel TCP's buffers would.
// later: not now, TCP carries the bytes meanwhile: a server not yet bound to its
// client (core/conn/binding.h), or a client that cannot write its proof into TCP now (fd,
// the program's socket, is -1, its TCP side ended, or it has no room and the caller
// may not wait for some). failed: the channel failed (the caller goes back to TCP).
// A client's proof goes into TCP once the server has its cutover message (write_proof),
// at once or by the poller's retries.
enum class Cut { done, later, failed };
Cut cut_over(int fd, Socket& s, Link& link) noexcept;
// Writes a client's due proof (Link::proof_due) into fd, the program's socket, once the
// server has the cutover message and the socket has room; `wait`: up to
// binding::kPatience for both. True when nothing is due any more. Needs s.tx_mu; takes
// the link's down_mu.
bool write_proof(int fd, Link& link, bool wait) noexcept;
// cut_over unless a send is in progress (then the next send does it). Needs rx_mu or
// nothing held; not the poller.
void cut_over_now(int fd, Socket& s, Link& link) noexcept;
// On the poller, once the upgrade settled: cut_over now if no send is in progress;
// otherwise the next send does it. A send side the program already ended on TCP has no
// next send, so its cutover (which carries the end of the stream) is tried again
// shortly, or the peer would wait for it.
void cut_over_soon(const std::shared_ptr<Link>& link, Socket& s, int tries = 0) noexcept;
// Ends the send side (shutdown, the last close): cuts over if not yet, then the fin
// once the send queue drained, or, for an abortive close (SO_LINGER {1, 0}), drops the
// queue and sends no fin (the kernel socket's close resets TCP). Needs s.tx_mu held.
// fd: the program's socket, or -1 once it closed it.
void end(int fd, Socket& s, Link& link, bool abortive) noexcept;
// The program closed its socket before its send side cut over: the end of its stream
// goes on TCP through ferry's duplicate of the socket, if it keeps one
// (upgrade::closing); without one, the kernel's close sent it. Needs s.tx_mu held.
void end_through_dup(Link& link) noexcept;
// On the poller, when the server's TCP side has news: takes the client's proof if it
// waits there (core/conn/binding.h), so that a server program that is not reading binds too.
void look_for_proof(const std::shared_ptr<Link>& link) noexcept;
// The program is about to close fd, the last descriptor of s. Kernel TCP answers a
// close with bytes left unread by resetting the connection; the ring's bytes are not
// the kernel's, so an upgraded connection whose ring holds some closes abortively, as
// SO_LINGER {1, 0} makes it: the kernel socket gets that option (TCP resets), and no
// fin goes over RDMA (the peer learns of it from TCP once the RDMA side is gone).
void abort_if_unread(int fd, Socket& s) noexcept;
// The program set SO_SNDBUF (s.sndbuf holds the kernel's value): the send queue's
// limit follows.
void sndbuf_changed(Socket& s) noexcept;

}  // namespace ferry::send_side
