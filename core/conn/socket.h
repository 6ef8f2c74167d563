// What ferry knows about one TCP socket (one open file description: every fd that
// dup() made from it shares this object).
#pragma once

#include "core/base/conn_report.h"
#include "core/base/fork_path.h"
#include "core/base/generation.h"
#include "core/base/lock.h"
#include "core/proto/conn_state.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace ferry {

struct Link;

enum class Role : uint8_t {
  fresh,       // socket() done; not yet listening or connected
  connecting,  // non-blocking connect() in progress
  listener,
  active,      // connected by connect()
  passive,     // returned by accept()
};

const char* to_string(Role r) noexcept;

class Socket {
 public:
  Socket(int family, Role role) noexcept : born(forking::generation()), family_(family), role_(role) {}
  // The program has let go of its last descriptor: an upgraded connection is flushed
  // and closed on the RDMA side, a listener stops listening there.
  ~Socket();

  const uint32_t born;  // forking::generation() when made
  int family() const noexcept { return family_; }
  Role role() const noexcept { return role_.load(std::memory_order_acquire); }
  void set_role(Role r) noexcept { role_.store(r, std::memory_order_release); }

  // Where the program's bytes travel: `kernel` without a link, else what the link's
  // state projects to (transport_of, core/proto/conn_state.h). Written only by the
  // link's moves (Link::attach, Link::transition), so it never disagrees with them.
  Transport transport() const noexcept { return transport_.load(std::memory_order_acquire); }
  // Transport changes of every socket of the process so far: while it stands still, no
  // socket changed transport.
  static uint64_t transitions() noexcept;

  // Options that matter once bytes bypass the kernel. Stored after the kernel
  // accepted them, so they always mirror the kernel socket's own values.
  std::atomic<bool> nonblocking{false};
  std::atomic<bool> nodelay{false};
  std::atomic<int64_t> rcvtimeo_us{0};  // 0 = wait forever
  std::atomic<int64_t> sndtimeo_us{0};
  std::atomic<int32_t> linger_s{-1};    // -1 = SO_LINGER off
  std::atomic<int64_t> sndbuf{0};       // SO_SNDBUF as the kernel reports it once set; 0 = autotuned
  std::atomic<int32_t> rcvlowat{1};     // SO_RCVLOWAT as the kernel holds it (capped, at least 1)
  // An accepted connection's options start as its listener's: the kernel makes the
  // connection's socket as a copy of the listening one.
  void inherit_options(const Socket& listener) noexcept;

  // This socket's readiness and bytes are the kernel's for good: a listener, or a
  // connection whose upgrade was decided against at connect/accept or failed. Calls
  // that only need the kernel's answer (epoll_ctl) then pass straight through. Set
  // once, never cleared; a connection that comes back from RDMA does not set it.
  std::atomic<bool> kernel_for_good{false};

  // A listener: the process whose rdma_cm listener answers for it (a forked child that
  // accepts on an inherited listener cannot receive its connections' requests), or
  // kListenerElsewhere: a process of the same user with a listener in the same
  // SO_REUSEPORT group, which redirects (core/conn/claims.h).
  std::atomic<int> listening_pid{0};
  static constexpr int kListenerElsewhere = -1;

  // The RDMA side; published before the transport leaves `kernel` and never replaced.
  std::shared_ptr<Link> link;
  // This connection's line in `ferry ss` (core/base/conn_report.h): taken when it was
  // connected, accepted or inherited (null for a listener, or with the table full),
  // given back when the socket goes.
  conn_report::Entry* report = nullptr;
  // Serializes one look at the send side (a non-blocking kernel send, or a copy into
  // the ring) and the send-side cutover. Never held while a call sleeps.
  Lock tx_mu;
  // Serializes one look at the receive side of an upgrading or upgraded socket (a
  // non-blocking kernel read, or a copy out of the ring). Never held while a call sleeps.
  Lock rx_mu;

 private:
  friend struct Link;
  // Link's projection of its state: succeeds iff the transport was `from`.
  bool project(Transport from, Transport to) noexcept;

  const int family_;
  std::atomic<Role> role_;
  std::atomic<Transport> transport_{Transport::kernel};
};

using SocketRef = std::shared_ptr<Socket>;

// A new Socket, destroyed through hazard::retire (the fd table's data path borrows
// sockets without counting references; see FdMap::borrow).
SocketRef make_socket(int family, Role role);
// What a socket with an RDMA side (a link, or an rdma_cm listener) does when the
// program lets go of its last descriptor (upgrade::release): set by the upgrade before
// it gives any socket one.
void on_release(void (*release)(Socket& s) noexcept) noexcept;

// A socket the process closed, if it was made before this process was forked and has
// no RDMA link: kept (a reference parked for good) instead of let go, and true. Letting
// it go would change nothing a child can see (a Socket from before the fork has nothing
// to undo: upgrade::release leaves the parent's objects alone) and would write into
// pages the child shares with its parent (the reference count, the object, malloc's
// free lists), each write a page copied. A server's child closes the listener and the
// parent's other connections; two dozen are kept, the rest let go.
FERRY_FORK_PATH bool keep_inherited(std::shared_ptr<Socket>& s) noexcept;

}  // namespace ferry
