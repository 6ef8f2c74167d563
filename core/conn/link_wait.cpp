#include "core/conn/link_wait.h"

#include "core/base/config.h"
#include "core/base/stats.h"
#include "core/base/wait.h"
#include "core/conn/readiness.h"
#include "core/conn/upgrade.h"

namespace ferry {

int wait_for(Link& link, uint32_t seen, int64_t deadline_us) {
  stats::add(stats::g.waits, 1);
  int64_t timeout = 0;
  if (deadline_us > 0) {
    timeout = deadline_us - now_us();
    if (timeout <= 0) return -EAGAIN;
  }
  Progress p;
  // Never the thorough look: a blocking call's answer is no snapshot. Its caller has
  // just looked itself, and what it missed is found by a later spin (which polls the
  // queue now and then) or by prepare_sleep before any sleep.
  p.poll = [](void* l, bool) { return readiness::drive(*static_cast<Link*>(l), false); };
  p.prepare_sleep = [](void* l) {
    Link& link = *static_cast<Link*>(l);
    upgrade::watch_for_sleeper(link);  // during the handshake only TCP wakes it
    readiness::prepare_sleep(link);
  };
  p.arg = &link;
  return wait_change(link.signal, seen, timeout, link.established() ? config().poll_us : 0, p);
}

}  // namespace ferry
