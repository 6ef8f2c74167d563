#include "core/conn/socket.h"

#include "core/base/fork_path.h"

#include "core/base/hazard.h"

#include <atomic>
#include <new>

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

SocketRef make_socket(int family, Role role) {
  return SocketRef(new Socket(family, role),
                   [](Socket* s) { hazard::retire(s, [](void* p) { delete static_cast<Socket*>(p); }); });
}

namespace {
std::atomic<void (*)(Socket&) noexcept> g_release{nullptr};
}  // namespace

void on_release(void (*release)(Socket& s) noexcept) noexcept { g_release.store(release, std::memory_order_release); }

Socket::~Socket() {
  conn_report::give_back(report);
  if (!link && role() != Role::listener) return;
  if (void (*release)(Socket&) noexcept = g_release.load(std::memory_order_acquire)) release(*this);
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

bool Socket::project(Transport from, Transport to) noexcept {
  if (!transport_.compare_exchange_strong(from, to, std::memory_order_acq_rel)) return false;
  g_transitions.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

uint64_t Socket::transitions() noexcept { return g_transitions.load(std::memory_order_seq_cst); }

namespace {

// Sockets keep_inherited() parked: references never let go (their storage is never
// destroyed, not even at exit).
constexpr int kParked = 24;
FERRY_FORK_DATA alignas(std::shared_ptr<Socket>) unsigned char g_parked[kParked * sizeof(std::shared_ptr<Socket>)];
FERRY_FORK_DATA std::atomic<int> g_parked_count{0};

}  // namespace

FERRY_FORK_PATH bool keep_inherited(std::shared_ptr<Socket>& s) noexcept {
  if (!s || s->born == forking::generation() || s->link) return false;
  int i = g_parked_count.load(std::memory_order_relaxed);
  do {
    if (i >= kParked) return false;
  } while (!g_parked_count.compare_exchange_weak(i, i + 1, std::memory_order_relaxed));
  new (g_parked + static_cast<size_t>(i) * sizeof(std::shared_ptr<Socket>)) std::shared_ptr<Socket>(std::move(s));
  return true;
}

}  // namespace ferry
