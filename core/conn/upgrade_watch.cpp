// The poller's watch of a connection's TCP side while it upgrades and after: made,
// re-armed for a sleeper or a sender waiting for room, removed; and what its events
// mean (the peer spoke, room in TCP, the client's proof arriving).
#include "core/base/lock.h"
#include "core/base/wait.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/send_side.h"
#include "core/conn/upgrade.h"
#include "core/conn/upgrade_state.h"

#include <sys/epoll.h>

#include <mutex>

namespace ferry::upgrade {
namespace detail {

using poller::Clock;

void unwatch(Link& link) {
  {
    std::lock_guard<Lock> lock(link.watch_mu);
    link.unwatched = true;
    if (link.watching.exchange(false)) poller::unwatch(link.fd);
  }
  link.signal.bump();  // a sender waiting for room the watch would report looks again
}

// One-shot while the handshake runs (a sleeper re-arms it), then every arrival and room.
void watch_now(Link& link) {
  std::lock_guard<Lock> lock(link.watch_mu);
  if (link.unwatched) return;
  const uint32_t events = link.state() != ConnState::handshake ? kWatchLive
                          : link.tcp_send_wait.load()           ? kWatchHandshake | EPOLLOUT
                                                                : kWatchHandshake;
  link.watch_idle.store(false);
  if (link.watching.load()) {
    poller::rewatch(link.fd, events, link.watcher);
  } else {
    link.watching.store(poller::watch(link.fd, events, link.watcher));
  }
}

bool note_spoke(Link& link) {
  int64_t none = 0;
  return link.spoke_ns.load(std::memory_order_relaxed) == 0 &&
         link.spoke_ns.compare_exchange_strong(none, ns_of(Clock::now()));
}

void Conn::on_event_st(uint32_t events) {
  FERRY_POLLER_ONLY();
  // Room in TCP (only a sender that found none asks for it) is no news from the peer.
  const bool news = events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (events & EPOLLOUT) link->tcp_send_wait.store(false);
  if (link->state() == ConnState::handshake) {
    if (news) {
      note_spoke(*link);
      arm_deadline_st(this);
    }
    // The one-shot watch is disarmed now; a sleeper has it re-armed (before the bump
    // below, so that one that misses this store is woken by the bump).
    link->watch_idle.store(true);
  }
  if (news) link->tcp_events.fetch_add(1, std::memory_order_relaxed);
  link->signal.bump();
  // A server still waiting for its client's proof takes it as it arrives, whether or
  // not the program reads now.
  if (news && !link->client && link->established()) send_side::look_for_proof(link);
}

}  // namespace detail

using namespace detail;

void peer_spoke(const std::shared_ptr<Link>& link) noexcept {
  if (link->client || !note_spoke(*link)) return;
  // A connection the poller has not taken up yet is armed by its launch, which looks
  // at spoke_ns after taking it (as this looks at `launch` after noting the time).
  if (link->launch.load() != Link::taken) return;
  // Handed over without a wake: the deadline counts from now, and the poller's next
  // round arms it (the connection's next arrival brings one if nothing comes sooner).
  poller::post([weak = std::weak_ptr<Link>(link)] {
    auto alive = weak.lock();
    auto it = alive ? st().conns.find(alive.get()) : st().conns.end();
    if (it != st().conns.end()) arm_deadline_st(it->second.get());
  });
}

void watch_for_sleeper(Link& link) noexcept {
  if (link.established()) return;
  // Made or re-armed here, without a poller round: the Conn it reports to lives while
  // the watch may be made (watch_now).
  // A sender waiting for room in TCP has the watch look for it (watch_now).
  if (link.watch_idle.exchange(false) || link.tcp_send_wait.load()) watch_now(link);
  // The limit on a server's wait for its request, posted by a read (peer_spoke), is
  // armed before anyone sleeps on the connection: the poller may have no other reason
  // to run until the peer's next bytes, which may be long in coming.
  if (!link.client && link.spoke_ns.load() != 0 && !link.limit_armed.load(std::memory_order_relaxed)) poller::nudge();
}

}  // namespace ferry::upgrade
