// The RDMA side of one TCP connection: handshake progress, the Channel once
// established, and the byte counts that define the cutover point.
#pragma once

#include "core/channel.h"
#include "core/wait.h"

#include <atomic>
#include <memory>

namespace ferry {

class Socket;

struct Link {
  enum class Phase : uint8_t {
    handshake,    // rdma_cm exchange in flight; kernel TCP carries the bytes
    established,  // the Channel works; the send side cuts over at the next chance
    failed,       // gave up before establishment; the socket stays on TCP
  };

  bool client = false;
  std::atomic<Phase> phase{Phase::handshake};
  // Bumped whenever anything a waiting thread cares about changed.
  Signal signal;
  // Set by the poller before `phase` becomes established; not replaced afterwards.
  std::unique_ptr<Channel> channel;
  // The program's descriptor the poller watches for TCP data and hangups. Whoever
  // flips `watching` off removes the watch (the program's close does, before the
  // number can be reused).
  int fd = -1;
  std::atomic<bool> watching{false};
  std::weak_ptr<Socket> socket;

  // Written under Socket::tx_mu; readiness reads them without it.
  uint64_t tcp_sent = 0;
  bool tx_cut = false;
  // The program shut the sending side (shutdown, close): later sends fail. The fin
  // itself goes once the send queue drained (Channel::finish_st).
  std::atomic<bool> fin_sent{false};
  // Threads inside a kernel send on this connection (blocking ones run without
  // Socket::tx_mu). The send side cuts over only when none is: tcp_sent must count
  // every byte TCP carries before the cutover. Under Socket::tx_mu.
  int tcp_senders = 0;
  // Written under Socket::rx_mu; readiness reads them without it.
  std::atomic<uint64_t> tcp_received{0};
  std::atomic<bool> rd_shut{false};
  // TCP arrivals the poller's watch saw (edge-triggered readiness counts them as new data).
  std::atomic<uint32_t> tcp_events{0};

  // Each side commits at the program's first data call on the connection: a connection
  // that never carries data costs no queue pair, and a connection handed to a forked
  // child (which keeps it on TCP) is never committed by the parent.
  enum Arm : int { undecided = 0, go = 1 };
  std::atomic<int> arm{undecided};

  // A forked child's copy of its parent's link. Its RDMA objects are the parent's and
  // are never touched here: polling the CQ would take the parent's completions (rxe's
  // queues are memory shared with the kernel), and destroying anything through the
  // inherited device descriptor would destroy the parent's. The copy is leaked.
  bool inherited = false;
  // Inherited while on RDMA: unusable in the child (ECONNRESET / EPIPE).
  bool orphaned = false;

  // The peer's rdma_cm side disconnected (set by the poller).
  std::atomic<bool> peer_gone{false};

  bool established() const { return phase.load(std::memory_order_acquire) == Phase::established; }
};

}  // namespace ferry
