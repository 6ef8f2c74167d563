#include "core/api.h"

#include "core/hazard.h"

#include "core/poller.h"
#include "core/rdma.h"
#include "core/runtime.h"
#include "core/upgrade.h"

namespace ferry::api {

// The child inherits every kernel socket as is, keeps connections that were still
// upgrading on TCP, gets its own log and counters, and makes its RDMA connections with
// its own rdma_cm channel and device contexts (see poller::after_fork_child).
long fork() noexcept {
  bool held = poller::hold_for_fork();
  long pid = sys(real.fork());
  if (pid != 0) poller::release_after_fork(held);
  if (pid == 0) {
    hazard::after_fork_child();
    poller::after_fork_child();
    rdma::after_fork_child();
    upgrade::after_fork_child();
    runtime::after_fork_child();
  }
  return pid;
}

}  // namespace ferry::api
