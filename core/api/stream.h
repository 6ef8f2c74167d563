// The socket calls of a connection whose transport is upgrading or rdma: the byte
// stream is read from TCP up to the peer's cutover point and from the ring after it,
// and written to TCP until this side cuts over and to the peer's ring after it, with
// the kernel's blocking, non-blocking, timeout, signal and EOF behaviour.
#pragma once

#include "core/api/api.h"
#include "core/conn/socket.h"

namespace ferry::stream {

long recv(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept;
long send(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept;
long shutdown(int fd, Socket& s, int how) noexcept;
// splice between the connection and a pipe, without the kernel's zero-copy but with its
// results: socket -> pipe takes only what the pipe has room for (peeked, written, then
// consumed), pipe -> socket reads only what the connection takes at once, so no byte
// is ever taken from one side that the other did not get.
long splice_out(int fd, Socket& s, int pipe, size_t len, unsigned flags) noexcept;
long splice_in(int pipe, int fd, Socket& s, size_t len, unsigned flags) noexcept;
// Bytes a recv could return now (FIONREAD / SIOCINQ).
long readable(int fd, Socket& s) noexcept;
// Bytes accepted by sends and not yet handed to the peer (SIOCOUTQ / SIOCOUTQNSD).
long unsent(int fd, Socket& s) noexcept;

}  // namespace ferry::stream
