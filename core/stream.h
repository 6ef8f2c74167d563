// The socket calls of a connection whose transport is upgrading or rdma: the byte
// stream is read from TCP up to the peer's cutover point and from the ring after it,
// and written to TCP until this side cuts over and to the peer's ring after it, with
// the kernel's blocking, non-blocking, timeout, signal and EOF behaviour.
#pragma once

#include "core/api.h"
#include "core/socket.h"

namespace ferry::stream {

long recv(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept;
long send(int fd, Socket& s, const iovec* iov, int iovcnt, int flags) noexcept;
long shutdown(int fd, Socket& s, int how) noexcept;
// Bytes a recv could return now (FIONREAD / SIOCINQ).
long readable(int fd, Socket& s) noexcept;

}  // namespace ferry::stream
