// The poll bits of one upgraded connection, as readiness (core/conn/readiness.h) and a
// connection going back to TCP (core/conn/downgrade.h) each compute them.
#pragma once

#include <cstdint>

namespace ferry::readiness {

struct State {
  uint32_t events = 0;  // EPOLLIN|EPOLLRDNORM, EPOLLOUT|EPOLLWRNORM, EPOLLRDHUP, EPOLLHUP, EPOLLERR
  uint32_t rx_events = 0, tx_events = 0;  // see Channel::rx_events_locked()
};

}  // namespace ferry::readiness
