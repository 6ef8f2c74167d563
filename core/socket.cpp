#include "core/socket.h"

#include "core/hazard.h"
#include "core/upgrade.h"

namespace ferry {

const char* to_string(Role r) noexcept {
  switch (r) {
    case Role::fresh: return "fresh";
    case Role::connecting: return "connecting";
    case Role::listener: return "listener";
    case Role::active: return "active";
    case Role::passive: return "passive";
  }
  return "?";
}

const char* to_string(Transport t) noexcept {
  switch (t) {
    case Transport::kernel: return "kernel";
    case Transport::upgrading: return "upgrading";
    case Transport::rdma: return "rdma";
    case Transport::closing: return "closing";
  }
  return "?";
}

namespace {
constexpr bool legal(Transport from, Transport to) {
  using T = Transport;
  return (from == T::kernel && (to == T::upgrading || to == T::closing)) ||
         (from == T::upgrading && (to == T::rdma || to == T::kernel || to == T::closing)) ||
         (from == T::rdma && (to == T::kernel || to == T::closing));
}
}  // namespace

SocketRef make_socket(int family, Role role) {
  return SocketRef(new Socket(family, role),
                   [](Socket* s) { hazard::retire(s, [](void* p) { delete static_cast<Socket*>(p); }); });
}

Socket::~Socket() {
  if (link || role() == Role::listener) upgrade::release(*this);
}

void Socket::inherit_options(const Socket& l) noexcept {
  constexpr auto r = std::memory_order_relaxed;
  nodelay.store(l.nodelay.load(r), r);
  rcvtimeo_us.store(l.rcvtimeo_us.load(r), r);
  sndtimeo_us.store(l.sndtimeo_us.load(r), r);
  linger_s.store(l.linger_s.load(r), r);
  sndbuf.store(l.sndbuf.load(r), r);
  rcvlowat.store(l.rcvlowat.load(r), r);
}

namespace {
std::atomic<uint64_t> g_transitions{0};
}  // namespace

bool Socket::transition(Transport from, Transport to) noexcept {
  if (!legal(from, to)) return false;
  if (to == Transport::upgrading && kernel_for_good.load(std::memory_order_acquire)) return false;
  if (!transport_.compare_exchange_strong(from, to, std::memory_order_acq_rel)) return false;
  g_transitions.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

uint64_t Socket::transitions() noexcept { return g_transitions.load(std::memory_order_seq_cst); }

}  // namespace ferry
