// upgrade::flush_at_exit (core/upgrade.h): at exit and exec, the bytes the program
// sent reach the peer's ring before the process image ends.
#include "core/upgrade.h"

#include "core/upgrade_state.h"

#include "core/down.h"
#include "core/link.h"
#include "core/log.h"
#include "core/poller.h"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace ferry::upgrade {

using poller::Clock;

namespace {

// Connections of this process whose bytes are not all in the peer's ring (or, going
// back to TCP, in the kernel's socket), the bytes they hold queued, and their writes
// not yet completed.
struct Unflushed {
  size_t links = 0;
  uint64_t bytes = 0;
  uint64_t writes = 0;
  bool operator==(const Unflushed& o) const { return links == o.links && bytes == o.bytes && writes == o.writes; }
};

Unflushed unflushed_st() {
  FERRY_POLLER_ONLY();
  Unflushed u;
  for (auto& entry : detail::st().conns) {
    Link& link = *entry.second->link;
    if (!link.channel || link.inherited) continue;
    if (link.down.load()) {
      if (down::backlog_waits(link)) ++u.links;
      continue;
    }
    std::lock_guard<Lock> lock(link.channel->mu());
    Channel& ch = *link.channel;
    ch.progress_st();
    // A peer that disconnected reads nothing more (as retire_st).
    if (ch.failed() || link.peer_gone.load() || (ch.drained_st() && ch.sq_outstanding_st() == 0)) continue;
    // The last writes may wait for no completion (one in kSignalEvery asks for one).
    if (ch.drained_st() && ch.unsignaled_st()) ch.flush_st();
    ++u.links;
    u.bytes += ch.unsent_st();
    u.writes += static_cast<uint64_t>(ch.sq_outstanding_st());
  }
  return u;
}

void flush_links_at_exit() {
  if (!poller::running() || poller::on_poller_thread()) return;  // never starts one
  constexpr auto kPatience = std::chrono::seconds(10);
  Unflushed last{SIZE_MAX, 0, 0};
  auto progress = Clock::now();
  for (;;) {
    auto look = std::make_shared<Unflushed>();
    // The poller drains the queues (it keeps their completion queues armed); this
    // thread only asks how far it got.
    if (!poller::run([look] { *look = unflushed_st(); }, std::chrono::seconds(1))) return;
    if (look->links == 0) return;
    const auto now = Clock::now();
    if (!(*look == last)) {
      last = *look;
      progress = now;
    } else if (now - progress >= kPatience) {
      FERRY_LOG(warn, "upgrade",
                "exiting with %zu connection(s) whose peer took no more for 10 s: %llu queued bytes and %llu writes lost",
                last.links, static_cast<unsigned long long>(last.bytes), static_cast<unsigned long long>(last.writes));
      return;
    }
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
}

}  // namespace

// On the fork path: every exiting child of a forking server comes here.
FERRY_FORK_PATH void flush_at_exit() noexcept {
  if (Link::alive() > 0) flush_links_at_exit();
}

}  // namespace ferry::upgrade
