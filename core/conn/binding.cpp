#include "core/conn/binding.h"

#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/channel.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

namespace ferry::binding {
namespace {

bool fill(void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = getrandom(b, n, 0);
    if (r > 0) {
      b += r;
      n -= static_cast<size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      // No kernel randomness (a seccomp filter, an old kernel): nothing weaker may stand
      // in for it, so the connection is not upgraded.
      FERRY_LOG(warn, "binding", "getrandom failed (%s): connections stay on TCP", strerror(errno));
      return false;
    }
  }
  return true;
}

Verdict refuse(Link& link, bool ended) {
  Channel& ch = *link.channel;
  link.forged.store(true);
  if (ended) {
    stats::add(stats::g.upgrades_unproven, 1);
    FERRY_LOG(info, "binding", "TCP ended where the peer's proof belonged: the connection stays on TCP");
  } else {
    stats::add(stats::g.upgrades_forged, 1);
    FERRY_LOG(warn, "binding",
              "no proof at the RDMA peer's cutover point (it does not hold this TCP connection, or its RDMA "
              "side failed before it could prove it does): the connection stays on TCP");
  }
  std::lock_guard<Lock> lock(ch.mu());
  ch.fail_locked("the peer did not prove it holds the TCP connection");
  return Verdict::refused;
}

}  // namespace

bool nonce(wire::Nonce& out) noexcept { return fill(out.data(), out.size()); }

bool secret(uint64_t& out) noexcept { return fill(&out, sizeof out); }

bool room(int fd) noexcept {
  pollfd p{fd, POLLOUT, 0};
  return real.poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP));
}

size_t send_proof(int fd, const wire::Proof& proof) noexcept {
  uint8_t buf[wire::kProofSize];
  wire::encode(proof, buf);
  size_t at = 0;
  const auto until = std::chrono::steady_clock::now() + kPatience;
  while (at < sizeof buf) {
    const ssize_t r = real.send(fd, buf + at, sizeof buf - at, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      at += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    // Only a socket under memory pressure takes part of so small a write after poll()
    // said it had room: the rest follows as soon as it can.
    if (r < 0 && errno == EAGAIN && at > 0 && std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLOUT, 0};
      real.poll(&p, 1, 100);
      continue;
    }
    break;
  }
  return at;
}

Verdict look(int fd, Link& link) noexcept {
  Channel& ch = *link.channel;
  wire::Nonce expect;
  {
    std::lock_guard<Lock> lock(ch.mu());
    if (ch.trusted()) return Verdict::proven;
    if (link.forged.load()) return Verdict::refused;
    expect = ch.nonce();
    if (link.tcp_received.load() != ch.peer_cutover()) {
      // Bytes past the cutover point were taken as the stream's: where the proof
      // belonged. Never meant to happen (core/api/stream.cpp reads no byte past it).
      FERRY_LOG(error, "binding", "read %llu bytes past the peer's cutover point: the connection stays on TCP",
                static_cast<unsigned long long>(link.tcp_received.load() - ch.peer_cutover()));
      link.forged.store(true);
      ch.fail_locked("read past the cutover point");
      return Verdict::refused;
    }
  }
  uint8_t buf[wire::kProofSize];
  ssize_t r;
  do {
    r = real.recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return errno == EAGAIN ? Verdict::wait : refuse(link, true);
  if (r == 0) return refuse(link, true);
  wire::Proof proof;
  switch (wire::decode(buf, static_cast<size_t>(r), expect, proof)) {
    case wire::Error::ok: break;
    case wire::Error::too_short: return Verdict::wait;
    default: return refuse(link, false);
  }
  // Peeked whole under rx_mu: the same bytes are taken now.
  if (real.recv(fd, buf, sizeof buf, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof buf)) return refuse(link, true);
  std::lock_guard<Lock> lock(ch.mu());
  ch.proven_locked(proof.secret);
  stats::add(stats::g.upgraded, 1);
  FERRY_LOG(debug, "binding", "the client proved it holds the TCP connection");
  return Verdict::proven;
}

Verdict take_left(int fd, const wire::Nonce& nonce) noexcept {
  uint8_t buf[wire::kProofSize];
  ssize_t r;
  do {
    r = real.recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return errno == EAGAIN ? Verdict::wait : Verdict::refused;
  if (r == 0) return Verdict::refused;
  wire::Proof proof;
  switch (wire::decode(buf, static_cast<size_t>(r), nonce, proof)) {
    case wire::Error::ok: break;
    case wire::Error::too_short: return Verdict::wait;
    default: return Verdict::refused;
  }
  if (real.recv(fd, buf, sizeof buf, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof buf)) return Verdict::refused;
  FERRY_LOG(debug, "binding", "took the client's proof after the program closed the connection");
  return Verdict::proven;
}

uint64_t before_proof(int fd, const wire::Nonce& nonce, uint64_t n) noexcept {
  if (n == 0) return 0;
  uint8_t head[4096];
  const ssize_t k = real.recv(fd, head, static_cast<size_t>(std::min<uint64_t>(n, sizeof head)), MSG_PEEK | MSG_DONTWAIT);
  if (k <= 0) return 0;
  const size_t at = wire::proof_start(head, static_cast<size_t>(k), nonce);
  return at < static_cast<size_t>(k) ? at : n;
}

uint64_t before_proof(int fd, const Link& link, uint64_t n) noexcept {
  if (link.client || !link.answered.load() || link.state() != ConnState::handshake) return n;
  return before_proof(fd, link.welcome_nonce, n);
}

bool proof_only(int fd, const Link& link) noexcept {
  if (link.client || !link.answered.load() || link.state() != ConnState::handshake) return false;
  uint8_t head[wire::kProofSize];
  const ssize_t k = real.recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
  return k > 0 && wire::proof_start(head, static_cast<size_t>(k), link.welcome_nonce) == 0;
}

}  // namespace ferry::binding
