// Binding an upgrade to its TCP connection: the RDMA side is trusted only once each end
// proved, through the TCP connection itself, that it holds that connection. Nobody but
// the two ends can write into or read from a TCP stream, so:
//
// - the server's Welcome carries a fresh nonce; the client writes it, with a secret of
//   its own (wire::Proof), into TCP right at its cutover point. A requester that is not
//   the TCP client cannot put it there: the server finds other bytes (the real client's)
//   and keeps the connection on TCP, having written nothing anywhere;
// - the server sends the secret back over RDMA (Op::bound). A responder that is not the
//   TCP server (another user holding the rdma_cm port) cannot read it: the client's
//   bytes stay in its send queue and go over TCP once it gives up waiting.
//
// Until then the server's sends go on over TCP and neither side reads the other's ring.
// The order (the client proves first) is what keeps a client that runs no ferry intact:
// the server never writes anything of ferry's into a TCP stream whose other end has not
// proven it runs ferry. docs/design.md, "Binding", has the whole argument.
#pragma once

#include "core/conn/link.h"
#include "core/proto/wire.h"

#include <chrono>
#include <cstdint>

namespace ferry::binding {

// How long a client waits for the server's bound before its bytes go over TCP.
constexpr std::chrono::seconds kPatience{10};

// Fresh random values (getrandom); false (and nothing to bind with) if there is none.
bool nonce(wire::Nonce& out) noexcept;
bool secret(uint64_t& out) noexcept;

// Client: writes its proof into TCP (fd: the program's socket, which has room: see
// room()). Returns how many of its bytes went: all of them, none (the socket had no
// room after all), or part (the socket broke).
size_t send_proof(int fd, const wire::Proof& proof) noexcept;
// Whether the kernel socket takes a proof now in one piece (its send buffer has room).
bool room(int fd) noexcept;

// Server: the look at TCP at the client's cutover point, once everything before it was
// read. Needs the socket's rx_mu (it takes bytes from the kernel socket).
enum class Verdict {
  wait,    // not enough bytes yet
  proven,  // the proof was there (taken): the channel is trusted, the client told
  refused  // other bytes, or TCP ended: the connection stays on TCP (Link::forged)
};
Verdict look(int fd, Link& link) noexcept;
// Server whose program closed the socket before the proof came: takes a proof of
// `nonce` from the head of fd's bytes (ferry's duplicate of the socket), so the kernel
// does not answer it with a reset. proven once taken; refused if other bytes are
// there, or TCP ended (the close is the kernel's own then); wait while none are.
Verdict take_left(int fd, const wire::Nonce& nonce) noexcept;
// Server whose Welcome is out and whose handshake has not settled: whether what fd's
// kernel socket holds starts with its client's proof (or as much of it as is there).
// Then nothing of the stream is there, whatever the kernel's readiness says, until the
// handshake settles: poll, select and epoll must not report it readable (a program
// told so would block in its read, its peer waiting for it).
bool proof_only(int fd, const Link& link) noexcept;
// How many of the n bytes fd's kernel socket holds come before where a proof of
// `nonce` starts or may start (all n when none is in the first 4 KiB).
uint64_t before_proof(int fd, const wire::Nonce& nonce, uint64_t n) noexcept;
// The same for a server whose Welcome is out and whose handshake has not settled; n
// for any other connection.
uint64_t before_proof(int fd, const Link& link, uint64_t n) noexcept;

}  // namespace ferry::binding
