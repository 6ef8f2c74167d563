// upgrade::flush_at_exit (core/conn/upgrade.h): at exit and exec, the bytes the program
// sent reach the peer's ring before the process image ends.
#include "core/conn/upgrade.h"

#include "core/conn/upgrade_state.h"

#include "core/base/log.h"
#include "core/base/wait.h"
#include "core/conn/downgrade.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"

#include <time.h>

#include <atomic>
#include <cstdint>

namespace ferry::upgrade {

namespace {

// Connections of this process whose bytes are not all in the peer's ring (or, going
// back to TCP, in the kernel's socket), the bytes they hold queued, and their writes
// not yet completed.
struct Unflushed {
  size_t links = 0;
  uint64_t bytes = 0;
  uint64_t writes = 0;
  size_t held = 0;  // of the links: whose channel's lock a program thread held at the look
};

// A connection is flushed once what the program had sent when the flush began is in
// the peer's ring: payload written up to that mark and every request posted by then
// completed. Other threads may go on sending meanwhile; their later bytes are not
// waited for, or a thread streaming on would hold the exit for ever.
Unflushed unflushed_st(uint64_t epoch) {
  FERRY_POLLER_ONLY();
  Unflushed u;
  for (auto& entry : detail::st().conns) {
    detail::Conn& c = *entry.second;
    Link& link = *c.link;
    if (!link.channel || link.inherited) continue;
    if (link.down()) {
      // A backlog not built yet (a client that gave up waiting for its server's bound
      // just now, core/conn/binding.h) is built and started here, as the retiring poller
      // would, before it is judged.
      int err = 0;
      downgrade::look_tx(-1, link, err);
      if (downgrade::backlog_waits(link)) ++u.links;
      continue;
    }
    // A channel whose lock a program thread holds (the one a signal interrupted, say)
    // is looked at next time; the others are not held up meanwhile.
    std::unique_lock<Lock> lock(link.channel->mu(), std::try_to_lock);
    if (!lock.owns_lock()) {
      ++u.links;
      ++u.held;
      if (c.flush.epoch == epoch) u.bytes += c.flush.left;  // as of its last look
      continue;
    }
    Channel& ch = *link.channel;
    ch.poll_all_locked();
    // A peer that disconnected reads nothing more (as retire_st).
    if (ch.failed() || link.peer_gone.load() || (ch.drained_locked() && ch.sq_outstanding_locked() == 0)) continue;
    if (c.flush.epoch != epoch) {
      c.flush.epoch = epoch;
      c.flush.bytes = ch.payload_written_locked() + ch.unsent_locked();
      c.flush.written = false;
    }
    const uint64_t written = ch.payload_written_locked();
    if (!c.flush.written && written >= c.flush.bytes) {
      c.flush.written = true;
      c.flush.posted = ch.posted_locked();
    }
    if (c.flush.written && ch.completed_locked() >= c.flush.posted) continue;
    // The last writes may wait for no completion (one in kSignalEvery asks for one);
    // never with the send queue full, where flush_locked would wait for room.
    if (ch.unsignaled_locked() && (ch.drained_locked() || c.flush.written) &&
        ch.sq_outstanding_locked() < Channel::kSendDepth)
      ch.flush_locked();
    // What is left counts only toward the marks, so that it only goes down: requests
    // other threads post meanwhile are not progress.
    ++u.links;
    c.flush.left = c.flush.written ? c.flush.posted - ch.completed_locked() : c.flush.bytes - written;
    (c.flush.written ? u.writes : u.bytes) += c.flush.left;
  }
  return u;
}

constexpr size_t kNoAnswer = SIZE_MAX;

// The poller's latest answer to flush_links, published for a thread that may be in a
// signal handler: plain atomics, no allocation, no lock.
FERRY_FORK_DATA std::atomic<int> g_asking{0};  // threads waiting in flush_links
std::atomic<uint64_t> g_epoch{0};  // raised by each: the marks are taken again
std::atomic<uint64_t> g_answers{0};
std::atomic<size_t> g_links{0};
std::atomic<uint64_t> g_bytes{0};
std::atomic<uint64_t> g_writes{0};
std::atomic<size_t> g_held{0};

uint64_t now_ms() { return static_cast<uint64_t>(now_us()) / 1000; }  // clock_gettime: signal-safe

void sleep_ms() {
  const timespec ms{0, 1000000};
  nanosleep(&ms, nullptr);
}

// Waits until the poller has drained every connection, 10 s passed without progress
// (fewer connections or less left than ever before in this wait) or 60 s in all, the poller gave no
// answer for 5 s (a loaded machine can keep a live poller from its CPU for a second or
// two, or a slow device call can), or for 1 s only connections whose lock a program
// thread holds were left (the thread a signal interrupted holds it for good). Async-signal-safe: the
// poller drains (it keeps the completion queues armed); this thread asks and reads the
// answers. What is left.
Unflushed wait_for_poller();

Unflushed flush_links() {
  g_epoch.fetch_add(1);
  g_asking.fetch_add(1);
  const Unflushed left = wait_for_poller();
  g_asking.fetch_sub(1);
  return left;
}

Unflushed wait_for_poller() {
  // kMostMs: a peer that keeps taking a little (a credit of 64 bytes every 5 s) must
  // not keep an exiting process for ever.
  constexpr uint64_t kPatienceMs = 10000, kAnswerMs = 5000, kHeldMs = 1000, kMostMs = 60000;
  Unflushed last{SIZE_MAX, 0, 0, 0};  // no answer yet
  size_t fewest = SIZE_MAX;
  uint64_t least = UINT64_MAX;
  uint64_t progress = now_ms(), unheld = progress;
  const uint64_t start = progress;
  // The first answer may come from a look that began before this thread asked (for
  // another thread that asks too); the second began after.
  uint64_t rounds = 2;
  for (;;) {
    const uint64_t answers = g_answers.load(std::memory_order_acquire);
    const uint64_t asked = now_ms();
    while (g_answers.load(std::memory_order_acquire) - answers < rounds) {
      if (now_ms() - asked >= kAnswerMs) return Unflushed{kNoAnswer, last.bytes, last.writes, 0};
      poller::nudge();
      sleep_ms();
    }
    rounds = 1;
    const Unflushed u{g_links.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed),
                      g_writes.load(std::memory_order_relaxed), g_held.load(std::memory_order_relaxed)};
    if (u.links == 0) return u;
    last = u;
    const uint64_t now = now_ms();
    if (u.links < fewest || u.bytes + u.writes < least) progress = now;
    fewest = u.links < fewest ? u.links : fewest;
    least = u.bytes + u.writes < least ? u.bytes + u.writes : least;
    if (u.held < u.links) unheld = now;
    if (now - progress >= kPatienceMs || now - unheld >= kHeldMs || now - start >= kMostMs) return u;
    sleep_ms();
  }
}

// With links of its own, and a poller to drain them (never starts one).
bool can_flush() { return poller::running() && !poller::on_poller_thread(); }

}  // namespace

// On the fork path: every exiting child of a forking server comes here.
FERRY_FORK_PATH void flush_at_exit() noexcept {
  if (Link::alive() == 0 || !can_flush()) return;  // only the first test is on the fork path
  const Unflushed left = flush_links();
  if (left.links == 0) return;
  if (left.links == kNoAnswer) {
    FERRY_LOG(warn, "upgrade", "exiting without an answer from the poller: what was queued may be lost");
    return;
  }
  FERRY_LOG(warn, "upgrade",
            "exiting with %zu connection(s) not flushed (no progress for 10 s, 60 s in all, or held by a thread): "
            "%llu queued bytes and %llu writes lost",
            left.links, static_cast<unsigned long long>(left.bytes), static_cast<unsigned long long>(left.writes));
}

void flush_at_signal() noexcept {
  if (Link::alive() > 0 && can_flush()) flush_links();
}

FERRY_FORK_PATH void flush_after_fork_child() noexcept {
  // A thread of the parent was waiting: it is not in the child.
  if (g_asking.load(std::memory_order_relaxed) != 0) g_asking.store(0, std::memory_order_relaxed);
}

void answer_flush_st() {
  FERRY_POLLER_ONLY();
  if (g_asking.load() == 0) return;
  const Unflushed u = unflushed_st(g_epoch.load());
  g_links.store(u.links, std::memory_order_relaxed);
  g_bytes.store(u.bytes, std::memory_order_relaxed);
  g_writes.store(u.writes, std::memory_order_relaxed);
  g_held.store(u.held, std::memory_order_relaxed);
  g_answers.fetch_add(1, std::memory_order_release);
}

}  // namespace ferry::upgrade
