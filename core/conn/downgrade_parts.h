// What the files of the downgrade (core/conn/downgrade.h) share: ferry's duplicate of the
// socket, the reset, and the steps that move each side of a DownState on. The
// *_locked steps need the link's down_mu.
#pragma once

#include "core/conn/link.h"

#include <sys/epoll.h>

#include <cstdint>

namespace ferry::downgrade::parts {

constexpr uint32_t kIn = EPOLLIN | EPOLLRDNORM;
constexpr uint32_t kOut = EPOLLOUT | EPOLLWRNORM;

// Resets the TCP connection: what the peer (and the program) get when the stream
// cannot go on intact.
void reset(int fd);
// Whether the peer's TCP side has ended or failed, with nothing more to read.
bool tcp_over(int fd);
// Makes link.down_state, with ferry's own duplicate of fd, if it is not there yet.
// `verify`: fd may no longer be this connection's (a readiness look's registration).
void ensure(int fd, Link& link, bool verify = false);
// The connection cannot go on intact: TCP is reset, and both directions say so.
// Needs the channel's lock too.
void reset_locked(Link& link, DownState& st, int fd, const char* why);
// We handed the connection to TCP: TCP's bytes are the program's from here on.
void settle_rx_locked(Link& link, DownState& st);
bool done_locked(const DownState& st);

// The sending side (core/conn/downgrade_send.cpp).
void build_tx_locked(Link& link, DownState& st);
bool waits_for_program(const Link& link, const DownState& st);
void pump_locked(Link& link, DownState& st);

// The receiving side (core/conn/downgrade_recv.cpp).
void advance_rx_locked(int fd, Link& link, DownState& st);

}  // namespace ferry::downgrade::parts
