// Channel's notifications: arming the completion queue, sleeping, and what the
// poller does when the queue reports.
#include "core/conn/channel.h"

#include "core/base/contract.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/channel_parts.h"
#include "core/conn/poller.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace ferry {
using namespace channel_parts;

void Channel::arm_locked() {
  FERRY_HELD(mu_);
  if (note_.armed) return;
  note_.armed = ibv_req_notify_cq(verbs_.cq.get(), 0) == 0;
}

// Arms the CQ for the credits that drain the send queue, then polls once: a credit that
// completed before the arming raises no event, and nobody else may be looking.
void Channel::arm_and_poll_locked() {
  FERRY_HELD(mu_);
  arm_locked();
  poll_all_locked();
}

void Channel::prepare_sleep_locked() {
  FERRY_HELD(mu_);
  // A reader about to sleep reports everything it consumed, so that if its process
  // dies meanwhile the peer can tell whether it left bytes unread (peer_left_unread_locked).
  if (recv_.ring.cursors().uncredited() && !failed()) give_credit_locked();
  arm_locked();
  poll_all_locked();
  // Writes landing from here on raise no completion unless the peer knows we sleep; it
  // compares where we looked with what it wrote, so nothing written meanwhile is missed.
  if (!failed() && send_.peer_known) {
    if (const uint32_t k = recv_.flow.sleep_count(recv_.ring.records())) {
      if (post_control_locked(wire::Control{wire::Op::sleep, recv_.ring.produced(), k})) {
        recv_.flow.slept(k);
        stats::add(stats::g.sleep_notices, 1);
      }
    }
  }

}

bool Channel::on_notified_locked() {
  FERRY_HELD(mu_);
  note_.armed = false;
  const uint64_t before = note_.polls;
  poll_all_locked();
  note_.polls_seen = note_.polls;
  if (signal_->wanted() || before == note_.polls_at_event) {
    prepare_sleep_locked();
  } else if (!drained_locked()) {
    arm_and_poll_locked();  // the credits that drain the send queue must wake us
  }
  note_.polls_at_event = note_.polls;
  return !note_.armed;
}

bool Channel::recheck_locked() {
  FERRY_HELD(mu_);
  if (note_.armed) return false;
  if (!drained_locked()) {
    arm_and_poll_locked();
    return !note_.armed;
  }
  if (note_.polls == note_.polls_seen) {
    prepare_sleep_locked();
    return !note_.armed;
  }
  note_.polls_seen = note_.polls;
  return true;
}

}  // namespace ferry
