// Which process of a process tree serves which accepted connection. A server whose
// workers accept on a listener the master opened (prefork), or whose master accepts and
// forks a child to serve (fork-after-accept), receives every upgrade request at the
// master: only the process that listened has the rdma_cm listener. The process that
// serves the connection (its first data call) writes a claim here naming its own
// rdma_cm port; the master answers the request with a redirect to that port.
//
// The table lives in memory mapped shared and anonymous by the first process of the
// tree that listens, before it forks: only its descendants (that did not exec) can
// read or write it, so no unrelated local process can claim a connection.
//
// SO_REUSEPORT listeners of unrelated processes share one port, and only one of them
// can hold the rdma_cm listener on it: a process whose first listener has SO_REUSEPORT
// maps the table of its effective user instead (/dev/shm/ferry-claims-2.UID, mode 0600,
// owned by that user), so that the process holding the rdma_cm port can redirect the
// others' requests. The kernel lets only sockets of one effective user join a reuseport
// group; the table has the same boundary. The name's number is the table's layout and
// key format: processes of another ferry with another format map another file.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::claims {

constexpr size_t kKeySize = 64;  // endpoint::conn_key's bytes, or another space's (upgrade.cpp)

struct Claim {
  int32_t pid = 0;
  uint16_t port = 0;  // the claimer's rdma_cm port
};

// A fixed array of slots, each guarded by a sequence word (odd while written), found
// by hashing the key and probing kProbe slots. Any number of processes may write and
// read at once; nothing blocks. A slot is reused once its claim expired or was dropped;
// a writer killed mid-write leaves its slot unusable (odd), nothing else.
class Table {
 public:
  static constexpr size_t kSlots = 8192;
  static constexpr size_t kProbe = 32;

  // Records that `pid` serves `key` until `expires` (any monotonic clock, in ns).
  // Replaces an older claim of the key. False when every probed slot is live.
  bool claim(std::string_view key, const Claim& who, int64_t now, int64_t expires) noexcept;
  // The newest live claim of `key`.
  bool find(std::string_view key, int64_t now, Claim& out) const noexcept;
  // Drops pid's claim of `key` (its request arrived, or it let the connection go).
  void drop(std::string_view key, int32_t pid) noexcept;

 private:
  struct Slot {
    std::atomic<uint32_t> seq{0};
    int32_t pid = 0;
    int64_t expires = 0;
    uint16_t port = 0;
    uint8_t key_len = 0;  // keys are bytes, zeros among them
    char key[kKeySize] = {};
  };
  size_t home(std::string_view key) const noexcept;
  // Reads slot i into the out-parameters when it holds a stable, live claim of `key`.
  bool read(size_t i, std::string_view key, int64_t now, Slot& out) const noexcept;
  Slot slots_[kSlots];
};

// This process's table: inherited from the parent at fork, made by make_shared().
Table* shared() noexcept;
// Maps a table if this process has none (at its first listen): its user's named one
// when `per_user` (a reuseport listener) and it can be trusted, else a fresh anonymous
// one. Idempotent.
Table* make_shared(bool per_user = false) noexcept;
// Maps the table in the file at `path`, creating it (mode 0600) if there is none;
// nullptr unless the file is a regular file of this effective user that no one else
// may read or write.
Table* map_named(const char* path) noexcept;

}  // namespace ferry::claims
