// The one state machine of a connection with an RDMA side (Link::state, core/conn/link.h):
// its states, the moves between them, and what each means for the program's calls
// (Socket::transport). Pure: no connection, no thread.
#pragma once

#include <cstdint>

namespace ferry {

//   handshake --> established --> downgrading --> downgraded
//       |              |                              ^
//       v              +------------------------------+ (an inherited copy, handed over)
//     failed
enum class ConnState : uint8_t {
  handshake,    // rdma_cm exchange in flight; kernel TCP carries the bytes
  established,  // the Channel works; the send side cuts over at the next chance
  failed,       // gave up before establishment; kernel TCP carries everything, for good
  downgrading,  // going back to kernel TCP (core/conn/downgrade.h): each direction moves on
                // by itself (DownState::Tx, DownState::Rx)
  downgraded,   // back on kernel TCP: the program's calls are the kernel's again
};

// Where the program's bytes travel: what a socket's calls look at first. A socket
// without an RDMA side is `kernel`; one with a link says what its state projects to.
enum class Transport : uint8_t {
  kernel,     // kernel TCP carries the bytes
  upgrading,  // rdma_cm handshake in flight; kernel TCP still carries the bytes
  rdma,       // cut over (or going back): the bytes pass through ferry's own paths
};

constexpr bool legal_move(ConnState from, ConnState to) {
  using S = ConnState;
  switch (from) {
    case S::handshake: return to == S::established || to == S::failed;
    case S::established: return to == S::downgrading || to == S::downgraded;
    case S::downgrading: return to == S::downgraded;
    case S::failed:
    case S::downgraded: return false;
  }
  return false;
}

constexpr Transport transport_of(ConnState s) {
  switch (s) {
    case ConnState::handshake: return Transport::upgrading;
    case ConnState::established:
    case ConnState::downgrading: return Transport::rdma;
    case ConnState::failed:
    case ConnState::downgraded: return Transport::kernel;
  }
  return Transport::kernel;
}

// Reached establishment: the Channel exists (the connection may be going back since).
constexpr bool was_established(ConnState s) {
  return s == ConnState::established || s == ConnState::downgrading || s == ConnState::downgraded;
}

// Left RDMA for kernel TCP, or leaving it.
constexpr bool is_down(ConnState s) { return s == ConnState::downgrading || s == ConnState::downgraded; }

constexpr const char* to_string(ConnState s) {
  switch (s) {
    case ConnState::handshake: return "handshake";
    case ConnState::established: return "established";
    case ConnState::failed: return "failed";
    case ConnState::downgrading: return "downgrading";
    case ConnState::downgraded: return "downgraded";
  }
  return "?";
}

constexpr const char* to_string(Transport t) {
  switch (t) {
    case Transport::kernel: return "kernel";
    case Transport::upgrading: return "upgrading";
    case Transport::rdma: return "rdma";
  }
  return "?";
}

}  // namespace ferry
