// The rest of a tracked stream socket's calls: shutdown, and the byte counts of the
// kernel socket plus the channel (SIOCOUTQ, FIONREAD).
#include "core/api/stream.h"

#include "core/base/libc.h"
#include "core/conn/binding.h"
#include "core/conn/channel.h"
#include "core/conn/downgrade.h"
#include "core/conn/link.h"
#include "core/conn/send_side.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <mutex>

namespace ferry::stream {

long shutdown(int fd, Socket& s, int how) noexcept {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return -EINVAL;
  Link& link = *s.link;
  if (!link.established() || s.transport() == Transport::kernel) {
    std::unique_lock<Lock> tx(s.tx_mu, std::defer_lock);
    if (how != SHUT_RD) tx.lock();
    if (!link.tx_cut) {  // (not cut over meanwhile by an upgrade settling)
      if (how != SHUT_RD) {
        // TCP carries the fin: should the upgrade settle now, its cutover ends the
        // ring's stream at once (cut_over).
        link.fin_sent = true;
      }
      long r = api::sys(real.shutdown(fd, how));
      link.signal.bump();  // sleepers on the link look at the kernel socket again
      return r;
    }
  }
  if (how != SHUT_WR) {
    std::lock_guard<Lock> rx(s.rx_mu);
    link.rd_shut = true;
  }
  if (how != SHUT_RD && link.down()) {
    link.fin_sent = true;
    long r = downgrade::shutdown_write(fd, link);
    link.signal.bump();
    return r;
  }
  if (how != SHUT_RD) {
    std::lock_guard<Lock> tx(s.tx_mu);
    send_side::end(fd, s, link, false);
  }
  link.signal.bump();
  return 0;
}

namespace {
// The kernel socket's count (an ioctl) plus what the channel holds (count(channel)).
template <class Count>
long kernel_plus_channel(int fd, Socket& s, unsigned long request, Count count) {
  int tcp = 0;
  if (real.ioctl(fd, request, &tcp) != 0) return -errno;
  Link& link = *s.link;
  if (!link.established()) return tcp;
  std::lock_guard<Lock> lock(link.channel->mu());
  return tcp + static_cast<long>(count(*link.channel));
}
}  // namespace

long unsent(int fd, Socket& s) noexcept {
  if (s.link && s.link->down()) return downgrade::unsent(fd, *s.link);
  return kernel_plus_channel(fd, s, SIOCOUTQ, [](Channel& ch) { return ch.unsent_locked(); });
}

long readable(int fd, Socket& s) noexcept {
  if (s.link && s.link->down()) return downgrade::readable(fd, *s.link);
  int tcp = 0;
  if (real.ioctl(fd, FIONREAD, &tcp) != 0) return -errno;
  // Only the stream's bytes count (core/conn/binding.h): the kernel's up to the peer's
  // cutover point, or before a client's proof while its place is not known yet, and
  // the ring's once the peer is trusted. A program told of a proof would block in
  // its read.
  Link& link = *s.link;
  uint64_t n = static_cast<uint64_t>(tcp);
  if (!link.established()) return static_cast<long>(binding::before_proof(fd, link, n));
  std::lock_guard<Lock> lock(link.channel->mu());
  Channel& ch = *link.channel;
  ch.poll_all_locked();
  if (ch.peer_cutover_known()) {
    const uint64_t got = std::min(link.tcp_received.load(), ch.peer_cutover());
    n = std::min(n, ch.peer_cutover() - got);
  } else if (!link.client && !ch.trusted()) {
    n = binding::before_proof(fd, ch.nonce(), n);
  }
  if (link.client || ch.trusted()) n += ch.readable_locked();
  return static_cast<long>(n);
}

}  // namespace ferry::stream
