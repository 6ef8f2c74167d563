#include "core/process/forking.h"

#include "core/base/fork_path.h"

#include "core/api/epoll_set.h"
#include "core/api/poll_mixed.h"
#include "core/base/config.h"
#include "core/base/deferral.h"
#include "core/base/hazard.h"
#include "core/base/log.h"
#include "core/base/own_fd.h"
#include "core/base/signals.h"
#include "core/base/stats.h"
#include "core/base/tcp_only.h"
#include "core/conn/fdtable.h"
#include "core/conn/handoff.h"
#include "core/conn/link.h"
#include "core/conn/poller.h"
#include "core/conn/upgrade.h"
#include "core/rdma/rdma.h"

#include <pthread.h>
#include <sys/single_threaded.h>

#include <algorithm>
#include <memory>
#include <new>
#include <vector>

namespace ferry::forking {

namespace {

// What the forking thread holds between prepare() and parent()/child(). Only that
// thread touches it. Made once and never destroyed; its vectors keep their capacity:
// a fork allocates nothing here, and with no link and no epoll set they stay empty.
struct Held {
  bool poller = false;
  std::vector<std::shared_ptr<EpollSet>> sets;
  std::vector<std::shared_ptr<Link>> links;  // each once
};
// In the data a forked child writes anyway: the parent writes it at every fork.
FERRY_FORK_DATA alignas(Held) unsigned char g_held_storage[sizeof(Held)];
FERRY_FORK_DATA Held* g_held = nullptr;

// In lock order: epoll sets, then channels, then signals (an epoll set's look takes a
// channel's lock, and progress on a channel bumps its signal).
void prepare() {
  deferral::before_fork();  // before any lock: the child's count goes back to this
  handoff::before_fork();  // first of the rest: it may make the board, and takes no lock held below
  poller::before_fork();
  rdma::before_fork();
  upgrade::before_fork();
  own::prepare_fork();
  Held& h = *g_held;
  const bool poller = poller::hold_for_fork();
  if (h.poller != poller) h.poller = poller;  // the fork page: written only on change
  const bool links = Link::alive() > 0;
  // A single-threaded process with no link has no other thread inside an epoll set
  // and no link registered in one: its sets are the child's as they are, and neither
  // the parent nor the child writes them (or this page) for the fork.
  if (links || !__libc_single_threaded) {
    epoll_sets().for_each([&](int, const std::shared_ptr<EpollSet>& set) {
      if (std::find(h.sets.begin(), h.sets.end(), set) == h.sets.end()) h.sets.push_back(set);
    });
  }
  std::sort(h.sets.begin(), h.sets.end());
  for (auto& set : h.sets) {
    set->lock_for_fork();
    if (links) set->links(h.links);
  }
  if (links) {
    fd_table().for_each([&](int, const SocketRef& s) {
      if (s->link) h.links.push_back(s->link);
    });
  }
  std::sort(h.links.begin(), h.links.end());
  h.links.erase(std::unique(h.links.begin(), h.links.end()), h.links.end());
  // The channel is published before the state says established, and only the poller
  // (held now) publishes it.
  for (auto& l : h.links)
    if (l->established() && !l->inherited) l->channel->mu().lock();
  for (auto& l : h.links) l->signal.lock_for_fork();
}

void parent() {
  handoff::after_fork_parent();
  Held& h = *g_held;
  for (auto& l : h.links) l->signal.unlock_after_fork();
  for (auto& l : h.links)
    if (l->established() && !l->inherited) l->channel->mu().unlock();
  for (auto& set : h.sets) set->unlock_after_fork();
  poller::release_after_fork(h.poller);
  if (!h.links.empty()) h.links.clear();
  if (!h.sets.empty()) h.sets.clear();
  own::parent_after_fork();
}

FERRY_FORK_PATH void child() {
  g_generation.fetch_add(1, std::memory_order_relaxed);
  own::child_after_fork();
  hazard::after_fork_child();
  Held& h = *g_held;
  // Every link the child can reach holds the parent's RDMA objects.
  for (auto& l : h.links) l->inherited = true;
  for (auto& l : h.links) l->signal.after_fork_child();
  // Channel and socket locks (core/base/lock.h) held by the parent's threads count as free.
  for (auto& set : h.sets) set->after_fork_child();
  poll_mixed_after_fork_child();
  poller::after_fork_child();
  rdma::after_fork_child();
  upgrade::after_fork_child();
  upgrade::flush_after_fork_child();
  handoff::after_fork_child();  // after the links it inherited are marked orphaned
  tcp_only::after_fork_child();
  if (config().enable) stats::after_fork_child();  // a child's own counters and log
  log::reopen_after_fork(config());
  signals::after_fork_child();
  if (!h.links.empty()) h.links.clear();
  if (!h.sets.empty()) h.sets.clear();
  // Last: the locks prepare() took count as free here, and so does this thread's count
  // of them (a signal the program handles is put off while it is not 0).
  deferral::after_fork_child();
}

pthread_once_t g_once = PTHREAD_ONCE_INIT;

}  // namespace

void install() noexcept {
  pthread_once(&g_once, [] {
    g_held = new (g_held_storage) Held;  // never destroyed: forks may come during exit
    pthread_atfork(prepare, parent, child);
  });
}

}  // namespace ferry::forking
