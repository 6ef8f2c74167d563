#include "core/conn/link.h"

#include "core/base/contract.h"
#include "core/base/log.h"
#include "core/conn/socket.h"

namespace ferry {

bool Link::attach(Socket& s) noexcept {
  if (s.kernel_for_good.load(std::memory_order_acquire) || !s.project(Transport::kernel, Transport::upgrading)) {
    transition(ConnState::handshake, ConnState::failed);  // nothing waits for it
    return false;
  }
  report = s.report;
  conn_report::state(report, conn_report::kLinked + static_cast<uint8_t>(ConnState::handshake));
  return true;
}

bool Link::transition(ConnState from, ConnState to) noexcept {
  if (!legal_move(from, to)) {
#if FERRY_CHECKS
    contract_broken("a connection state move off the table (core/proto/conn_state.h)", __func__);
#else
    FERRY_LOG(warn, "conn", "refused a connection state move off the table: %s -> %s", to_string(from), to_string(to));
    return false;
#endif
  }
  if (!state_.compare_exchange_strong(from, to)) return false;
  const Transport was = transport_of(from), now = transport_of(to);
  if (std::shared_ptr<Socket> s = socket.lock()) {
    if (was != now) s->project(was, now);
    conn_report::state(s->report, conn_report::kLinked + static_cast<uint8_t>(to));
  }
  return true;
}

}  // namespace ferry
