// Going back to TCP, the sending side (core/conn/downgrade.h): the backlog of what the peer
// did not credit, behind our header, written through ferry's duplicate of the socket.
#include "core/conn/downgrade.h"
#include "core/base/contract.h"
#include "core/conn/downgrade_parts.h"

#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/stats.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <mutex>

namespace ferry::downgrade {
namespace {

// A client whose cutover was never confirmed, and that was never bound, wrote nothing
// past its cutover point anywhere: not into the ring (its bytes wait in its send queue
// until the server answers its proof) and not its proof into TCP (that waits for the
// confirmation). Whether or not the server learnt the point, its queue on TCP with no
// header is the stream: a server that knows the point finds no proof there and reads
// TCP as it is (core/conn/binding.h). False, with nothing done, when it is not so.
// Needs down_mu and the channel's lock.
bool unbound_goes_on_locked(Link& link, DownState& st, Channel& ch, int fd) {
  FERRY_HELD(link.down_mu);
  if (!link.client || ch.trusted() || link.handed_off.load() || fd < 0 || ch.payload_written_locked() != 0)
    return false;
  std::vector<uint8_t> queued;
  if (ch.take_unacked_locked(queued) != 0) return false;
  link.proof_due.store(false);
  link.tx_left.store(true);
  FERRY_LOG(info, "downgrade", "our cutover was never confirmed and nothing went past it: the stream goes on over TCP");
  stats::add(stats::g.bytes_resent, queued.size());  // counted as sent over RDMA when queued
  st.backlog = std::move(queued);
  st.at = 0;
  st.fin = link.fin_sent.load();
  st.lazy = false;
  st.tx = DownState::Tx::writing;
  return true;
}

}  // namespace

namespace parts {

// Builds the send side's backlog once the peer has confirmed our cutover (and, for a
// hand-off of ours, our hand-off message). Needs down_mu.
void build_tx_locked(Link& link, DownState& st) {
  FERRY_HELD(link.down_mu);
  settle_rx_locked(link, st);
  if (st.tx != DownState::Tx::waiting) return;
  Channel& ch = *link.channel;
  std::lock_guard<Lock> lock(ch.mu());
  ch.poll_all_locked();  // credits and confirmations that came meanwhile
  const int fd = st.fd.load();
  if (!link.tx_cut) {
    // Nothing of ours went into the ring: TCP simply goes on.
    link.tx_left.store(true);
    st.tx = DownState::Tx::done;
    return;
  }
  // The peer handed the connection over: whoever reads TCP next may not be ferry, so
  // the bytes resume exactly past what the peer read from its ring, with no header.
  const bool headerless = ch.peer_handoff();
  if (!headerless) {
    // Our header must not reach the peer before it knows where our ring's bytes begin,
    // nor, for a hand-off of ours, before our hand-off message (it decides the peer's
    // own resend).
    if (!ch.confirmed_locked() || (link.handed_off.load() && !ch.handed_off_locked())) {
      if (!ch.failed()) return;  // the completion will come
      if (unbound_goes_on_locked(link, st, ch, fd)) return;
      // The peer may or may not know where our ring bytes begin: no stream it could
      // read is sure to be right, so the connection resets rather than guess.
      reset_locked(link, st, fd, "the RDMA side failed before the peer confirmed our messages");
      return;
    }
  }
  if (fd < 0) {
    // Nothing is left to write through.
    link.tx_left.store(true);
    ch.leave_locked();
    st.tx = DownState::Tx::broken;
    return;
  }
  // Only a peer that cut over carries its end of stream on RDMA: one that never did
  // (a server not yet given our proof) sends its fin on TCP, and a fin there is a
  // half-close of a peer that still reads, not a sign that its process is gone.
  if (ch.peer_cutover_known() && tcp_over(fd)) {
    // The peer's process is gone: there is nobody to resend to, and sends go to the
    // kernel socket as it stands, which answers as kernel TCP would after the peer
    // closed (the first send taken, the peer's reset, then EPIPE). A header written
    // now would take that first send's place.
    link.tx_left.store(true);
    // But bytes of ours that reached the peer after its fin, never read, are that
    // first send: kernel TCP's peer answered them with its reset, and a connection
    // that had seen the fin reports EPIPE from then on.
    const bool answered = ch.peer_fin() && ch.peer_left_unread_locked();
    ch.leave_locked();
    st.tx = answered ? DownState::Tx::broken : DownState::Tx::done;
    if (answered) st.tx_error = EPIPE;
    return;
  }
  const size_t head = headerless ? 0 : tcp_resume::kHeaderSize;
  st.backlog.resize(head);
  const int64_t resent = ch.take_unacked_locked(st.backlog);
  link.tx_left.store(true);
  if (resent < 0) {
    reset_locked(link, st, fd, "the staging area does not hold the unconfirmed records");
    return;
  }
  // Stream offset of the first resent byte, in ring payload bytes and overall.
  const uint64_t from_ring = ch.payload_written_locked() - static_cast<uint64_t>(resent);
  if (headerless) {
    uint64_t skip = 0;
    if (!tcp_resume::skip_to(from_ring, ch.peer_handoff_read(), static_cast<uint64_t>(resent), skip)) {
      reset_locked(link, st, fd, "the peer's hand-off names bytes it was never credited for");
      return;
    }
    st.backlog.erase(st.backlog.begin(), st.backlog.begin() + static_cast<std::ptrdiff_t>(skip));
  } else {
    tcp_resume::encode(tcp_resume::Header{link.tcp_sent + from_ring}, st.backlog.data());
  }
  stats::add(stats::g.bytes_resent, st.backlog.size() - head);
  st.at = 0;
  st.fin = link.fin_sent.load();
  st.lazy = head > 0 && st.backlog.size() == head;
  // A client's proof that never went (core/conn/binding.h) goes first: the server reads it
  // at our cutover point, before anything else of ours there.
  if (head > 0 && link.proof_due.exchange(false)) {
    uint8_t proof[wire::kProofSize];
    wire::encode(link.proof, proof);
    st.backlog.insert(st.backlog.begin(), proof, proof + sizeof proof);
    st.lazy = false;
  }
  st.tx = DownState::Tx::writing;
}

// Whether the backlog waits for the program: a header alone, with no fin or hand-off
// that needs it out.
bool waits_for_program(const Link& link, const DownState& st) {
  return st.lazy && !st.fin && !link.handed_off.load() && !link.leaving.load();
}

// Writes what the kernel takes of the backlog, through ferry's duplicate. Needs down_mu.
void pump_locked(Link& link, DownState& st) {
  FERRY_HELD(link.down_mu);
  if (st.tx != DownState::Tx::writing || st.fd_closing || waits_for_program(link, st)) return;
  const int fd = st.fd.load();
  while (st.at < st.backlog.size()) {
    const ssize_t r = real.send(fd, st.backlog.data() + st.at, st.backlog.size() - st.at, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      st.at += static_cast<size_t>(r);
      stats::add(stats::g.bytes_tcp_sent, static_cast<uint64_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    st.tx = DownState::Tx::broken;
    st.tx_error = r < 0 ? errno : EPIPE;
    std::vector<uint8_t>().swap(st.backlog);
    link.signal.bump();
    return;
  }
  std::vector<uint8_t>().swap(st.backlog);
  st.tx = DownState::Tx::done;
  if (st.fin) real.shutdown(fd, SHUT_WR);
  link.signal.bump();
}

}  // namespace parts

using namespace parts;

Send look_tx(int fd, Link& link, int& err, bool sending) noexcept {
  if (fd >= 0) ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return Send::wait;
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  if (sending) st.lazy = false;
  pump_locked(link, st);
  switch (st.tx) {
    case DownState::Tx::waiting:
    case DownState::Tx::writing: return Send::wait;
    case DownState::Tx::done: return Send::direct;
    case DownState::Tx::broken: err = st.tx_error; return Send::dead;
  }
  return Send::dead;
}

void error_taken(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  if (link.down_state) link.down_state->tx_error = 0;
}

long shutdown_write(int fd, Link& link) noexcept {
  ensure(fd, link);
  std::lock_guard<Lock> lock(link.down_mu);
  DownState& st = *link.down_state;
  build_tx_locked(link, st);
  if (st.tx == DownState::Tx::done) return real.shutdown(fd, SHUT_WR) == 0 ? 0 : -errno;
  st.fin = true;  // after the backlog (or never, for a connection that cannot go on)
  pump_locked(link, st);
  return 0;
}

long unsent(int fd, Link& link) noexcept {
  int n = 0;
  if (real.ioctl(fd, SIOCOUTQ, &n) != 0) return -errno;
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return n;
  const DownState& st = *link.down_state;
  // A header alone that waits for the program's next send is not the program's bytes:
  // a program that waits for its queue to empty must see it empty.
  if (st.tx != DownState::Tx::writing || waits_for_program(link, st)) return n;
  return n + static_cast<long>(st.backlog.size() - st.at);
}

void released(Link& link) noexcept {
  // Passed on (core/conn/handoff.h): another process may hold the socket, and TCP's end is
  // the kernel's, when the last descriptor of it closes (ferry's duplicate, once the
  // backlog is out, among them). A shutdown here would end the stream under it.
  if (link.handed_off.load() || link.leaving.load()) return;
  link.fin_sent.store(true);
  std::lock_guard<Lock> lock(link.down_mu);
  if (link.down_state) link.down_state->fin = true;
}

bool flushed(Link& link) noexcept {
  int err = 0;
  if (look_tx(-1, link, err) != Send::wait) return true;
  std::lock_guard<Lock> lock(link.down_mu);
  // Without ferry's duplicate nothing more can be written.
  return !link.down_state || link.down_state->fd.load() < 0;
}

bool backlog_waits(Link& link) noexcept {
  std::lock_guard<Lock> lock(link.down_mu);
  if (!link.down_state) return false;
  const DownState& st = *link.down_state;
  return st.tx == DownState::Tx::writing && !st.lazy && st.fd.load() >= 0;
}

}  // namespace ferry::downgrade
