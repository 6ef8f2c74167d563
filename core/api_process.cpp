#include "core/api.h"

#include "core/poller.h"
#include "core/runtime.h"

namespace ferry::api {

// Every tracked socket is a plain kernel socket, which the child inherits as is; the
// child only needs its own log and counters.
long fork() noexcept {
  long pid = sys(real.fork());
  if (pid == 0) {
    poller::after_fork_child();
    runtime::after_fork_child();
  }
  return pid;
}

}  // namespace ferry::api
