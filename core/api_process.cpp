#include "core/api.h"

namespace ferry::api {

// glibc's fork runs ferry's pthread_atfork handlers (core/forking.h), as it does for
// its own forks (daemon(), and a library's fork): the child inherits every kernel
// socket as is, keeps connections that were still upgrading on TCP, gets its own log
// and counters, and makes its RDMA connections with its own rdma_cm channel and device
// contexts.
long fork() noexcept { return sys(real.fork()); }

}  // namespace ferry::api
