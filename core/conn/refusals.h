// Servers that answered a client's upgrade request with "nothing listens here": the
// peer's rdma_cm found no listener on the port, so the server there runs no ferry.
// For a while after such an answer, new connections to the same address and port
// stay on TCP without asking: each request costs the poller an rdma_cm id, a route, a
// queue pair and two registered rings, and a client that opens a connection per
// request to a plain server (a web client without keep-alive, pgbench -C) would pay
// that per connection. The memory is the user's, shared by its processes in one
// network namespace (core/base/user_shm.h): a short-lived client process (a command-line
// client, a benchmark's burst, a script's) learns from the ones before it, and never
// starts the poller or loads rdma-core for a server known to run no ferry. A server
// that starts running ferry is asked again once the memory runs out (kMemoryNs).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace ferry::refusals {

inline constexpr int64_t kMemoryNs = 10'000'000'000;  // 10 s

// An address family, address and port (v4-mapped addresses as IPv4).
struct Key {
  uint8_t family = 0;
  uint16_t port = 0;
  uint8_t addr[16] = {};
  bool operator==(const Key&) const = default;
};
Key key_of(const sockaddr_storage& peer) noexcept;

// A few peers with the time each is remembered until (CLOCK_MONOTONIC, ns, which is
// the host's). Any number of threads and processes may use one at once; nothing
// blocks: each slot is guarded by a sequence word (odd while written), and a note
// that meets another writer is dropped (the peer is only asked once more).
class Table {
 public:
  static constexpr int kSlots = 32;
  bool holds(const Key& k, int64_t now_ns) const noexcept;
  // Remembers k until `until_ns`, in its slot or in the one that expires first.
  void note(const Key& k, int64_t until_ns) noexcept;

 private:
  static constexpr int kWords = (sizeof(Key) + 7) / 8;
  struct Slot {
    std::atomic<uint32_t> seq{0};
    std::atomic<uint64_t> key[kWords] = {};
    std::atomic<int64_t> until{0};
  };
  // A stable copy of slot s; false while it is written.
  static bool read(const Slot& s, Key& key, int64_t& until) noexcept;
  Slot slots_[kSlots];
};

// The user's shared table, or the process's own where it cannot be mapped (any
// thread).
bool refused_lately(const sockaddr_storage& peer) noexcept;
void note_refusal(const sockaddr_storage& peer) noexcept;

// One question per server at a time: while one connection's request to a server waits
// for its answer, the process's other connections to that server wait for that answer
// instead of asking too. A client pool (or wrk) opening its connections at once to a
// plain server would otherwise build a queue pair and register rings for each. The
// waiters then stay on TCP if the answer was "nothing listens here", and ask on their
// own (all at once) otherwise. Not locked: only the poller thread uses it.
template <class T>
class Askers {
 public:
  // Whether `who` asks `k` now: nobody else does, and it becomes the asker. If not,
  // it waits for the asker's answer.
  bool ask(const Key& k, const std::shared_ptr<T>& who) {
    for (Question& q : questions_) {
      if (q.key == k) {
        q.waiters.push_back(who);
        return false;
      }
    }
    questions_.push_back({k, who.get(), {}});
    return true;
  }
  // `who`'s answer came, or it stopped asking (gone, or waited on too long): the
  // connections that waited for it, to go on. None when `who` asks nothing.
  std::vector<std::weak_ptr<T>> answered(const T* who) {
    for (auto it = questions_.begin(); it != questions_.end(); ++it) {
      if (it->asker == who) {
        std::vector<std::weak_ptr<T>> w = std::move(it->waiters);
        questions_.erase(it);
        return w;
      }
    }
    return {};
  }
  // Who asks k now; nullptr when nobody does.
  const T* asker_of(const Key& k) const {
    for (const Question& q : questions_)
      if (q.key == k) return q.asker;
    return nullptr;
  }

 private:
  struct Question {
    Key key;
    const T* asker;
    std::vector<std::weak_ptr<T>> waiters;
  };
  std::vector<Question> questions_;
};

}  // namespace ferry::refusals
