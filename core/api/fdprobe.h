// Recognizes a TCP socket that ferry did not see being created: inherited across
// exec, present before ferry started, or received through SCM_RIGHTS.
#pragma once

#include "core/conn/socket.h"

namespace ferry {

// A new Socket describing fd when it is an AF_INET/AF_INET6 TCP socket, else null.
// Costs a handful of syscalls; never used on a data path.
SocketRef probe_fd(int fd) noexcept;

// Tracks every TCP socket the process holds right now (reads /proc/self/fd).
void adopt_open_fds() noexcept;

// Tracks the TCP sockets among `n` descriptors (e.g. from SCM_RIGHTS).
void adopt_fds(const int* fds, int n) noexcept;

}  // namespace ferry
