// Blocking-socket semantics on one TCP connection per scenario, both ends in this
// process. Prints one line per observable result (return value, errno, bytes); run
// plainly and under ferry, the outputs must be identical. Under ferry every scenario
// first waits until its connection is on RDMA (SEMANTICS_STAT_CMD names `ferry stat`), so
// the checks exercise the upgraded path, not the kernel's.
//   stream_semantics IP
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <pthread.h>
#include <linux/sockios.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "semantics_pair.h"

namespace {

using namespace semantics;

std::vector<char> pattern(size_t n, unsigned mul, unsigned add) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * mul + add);
  return v;
}

void on_signal(int) {}

// Repeats op (a send or a receive) until n bytes moved or a call returned <= 0; how many moved.
template <class Op>
size_t move_all(char* buf, size_t n, Op op) {
  size_t done = 0;
  while (done < n) {
    long r = op(buf + done, n - done);
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}
size_t send_all(int fd, const char* buf, size_t n) {
  return move_all(const_cast<char*>(buf), n, [fd](char* b, size_t k) { return send(fd, b, k, 0); });
}
size_t recv_upto(int fd, char* buf, size_t n) {
  return move_all(buf, n, [fd](char* b, size_t k) { return recv(fd, b, k, 0); });
}

void peek_then_read() {
  puts("peek then read");
  Pair p;
  show("send", send(p.c, "abcdef", 6, 0));
  char buf[16] = {};
  show("recv MSG_PEEK|MSG_WAITALL 4", recv(p.s, buf, 4, MSG_PEEK | MSG_WAITALL));
  printf("  peeked %.4s\n", buf);
  show("recv 6 MSG_WAITALL", recv(p.s, buf, 6, MSG_WAITALL));
  printf("  read %.6s\n", buf);
}

void waitall_across_pieces() {
  puts("MSG_WAITALL across pieces");
  Pair p;
  std::thread t([&] {
    for (int i = 0; i < 5; ++i) {
      usleep(20000);
      send(p.c, "0123456789", 10, 0);
    }
  });
  char buf[64] = {};
  show("recv 50 MSG_WAITALL", recv(p.s, buf, 50, MSG_WAITALL));
  t.join();
  printf("  %.50s\n", buf);
}

void nonblocking_flags() {
  puts("MSG_DONTWAIT and zero-length calls");
  Pair p;
  char buf[8];
  show("recv MSG_DONTWAIT, nothing there", recv(p.s, buf, sizeof buf, MSG_DONTWAIT));
  show("send 0 bytes", send(p.c, buf, 0, 0));
  show("send 3", send(p.c, "xyz", 3, 0));
  usleep(100000);
  show("recv 0 bytes with data waiting", recv(p.s, buf, 0, 0));
  int n = -1;
  show("ioctl FIONREAD", ioctl(p.s, FIONREAD, &n));
  printf("  FIONREAD %d\n", n);
  show("recv MSG_DONTWAIT 8", recv(p.s, buf, sizeof buf, MSG_DONTWAIT));
}

void receive_timeout() {
  puts("SO_RCVTIMEO");
  Pair p;
  timeval tv{0, 200000};
  show("setsockopt SO_RCVTIMEO", setsockopt(p.s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  char buf[8];
  show("recv with nothing to read", recv(p.s, buf, sizeof buf, 0));
}

// Options set on a listener after listen() are its connections' (the kernel makes an
// accepted socket as a copy of the listening one): the receive timeout, the low-water
// mark and an abortive close.
void options_from_listener() {
  puts("options set on the listener after listen()");
  Pair p([](int l) {
    timeval tv{0, 300000};
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int lowat = 4;
    setsockopt(l, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    linger lg{1, 0};
    setsockopt(l, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  });
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGALRM, &sa, nullptr);
  alarm(5);  // a receive that ignored the timeout ends with EINTR, not a stuck test
  char buf[8];
  show("recv with nothing to read", recv(p.s, buf, sizeof buf, 0));
  show("send 2", send(p.c, "ab", 2, 0));
  show("recv 8, 2 bytes to come and a mark of 4", recv(p.s, buf, sizeof buf, 0));
  alarm(0);
  signal(SIGALRM, SIG_DFL);
  show("close", close(p.s));
  p.s = -1;
  show("the client's recv", recv(p.c, buf, sizeof buf, 0));
}

// SO_RCVLOWAT: readiness only once the mark's bytes are there; a blocking receive waits
// for min(mark, len) bytes, a non-blocking one takes what there is, and a peek waits
// as a read does.
void receive_low_water() {
  puts("SO_RCVLOWAT");
  Pair p;
  int lowat = 100;
  show("setsockopt SO_RCVLOWAT 100", setsockopt(p.s, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat));
  socklen_t len = sizeof lowat;
  lowat = 0;
  show("getsockopt SO_RCVLOWAT", getsockopt(p.s, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len));
  printf("  SO_RCVLOWAT %d\n", lowat);
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, p.s, &ev);
  show("send 10", send(p.c, "0123456789", 10, 0));
  usleep(100000);
  pollfd pf{p.s, POLLIN, 0};
  show("poll, 10 bytes there", poll(&pf, 1, 0));
  show("epoll_wait, 10 bytes there", epoll_wait(ep, &ev, 1, 0));
  const std::vector<char> more = pattern(220, 7, 3);
  char buf[256];
  show("recv 8", recv(p.s, buf, 8, 0));
  show("recv MSG_DONTWAIT 64", recv(p.s, buf, 64, MSG_DONTWAIT));
  std::thread t([&] {
    usleep(50000);
    send(p.c, more.data(), 30, 0);
    usleep(50000);
    send(p.c, more.data() + 30, 90, 0);
  });
  show("recv 200, 30 and then 90 bytes to come", recv(p.s, buf, 200, 0));
  t.join();
  // (A peek that waits for the mark is left out: the kernel's never wakes when the
  // bytes that complete it are merged into the packet it peeked.)
  show("send 80", send(p.c, more.data() + 120, 80, 0));
  usleep(100000);
  show("poll, 80 bytes there", poll(&pf, 1, 0));
  show("send 20", send(p.c, more.data() + 200, 20, 0));
  show("poll, 100 bytes there", poll(&pf, 1, 2000));
  show("epoll_wait, 100 bytes there", epoll_wait(ep, &ev, 1, 2000));
  show("recv 200 MSG_PEEK", recv(p.s, buf, 200, MSG_PEEK));
  show("recv 200", recv(p.s, buf, 200, 0));
  printf("  %s\n", memcmp(buf, more.data() + 120, 100) ? "DIFFERENT" : "the bytes sent");
  close(ep);
}

void vectors() {
  puts("writev and readv");
  Pair p;
  iovec out[3] = {{const_cast<char*>("ab"), 2}, {const_cast<char*>(""), 0}, {const_cast<char*>("cdefg"), 5}};
  show("writev", writev(p.c, out, 3));
  char x[3] = {}, y[4] = {};
  iovec in[2] = {{x, 3}, {y, 4}};
  size_t got = 0;
  while (got < 7) {
    long r = readv(p.s, in, 2);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
    if (got < 7) {  // move the vector on (a short read is the kernel's right)
      size_t skip = static_cast<size_t>(r);
      for (auto& v : in) {
        size_t d = skip < v.iov_len ? skip : v.iov_len;
        v.iov_base = static_cast<char*>(v.iov_base) + d;
        v.iov_len -= d;
        skip -= d;
      }
    }
  }
  printf("  readv got %zu: %.3s|%.4s\n", got, x, y);
}

void shutdown_write_gives_eof() {
  puts("shutdown(SHUT_WR): data, then EOF");
  Pair p;
  show("send 5", send(p.c, "hello", 5, 0));
  show("shutdown SHUT_WR", shutdown(p.c, SHUT_WR));
  char buf[16] = {};
  show("recv 5 MSG_WAITALL", recv(p.s, buf, 5, MSG_WAITALL));
  show("recv after EOF", recv(p.s, buf, sizeof buf, 0));
  show("recv after EOF again", recv(p.s, buf, sizeof buf, 0));
  show("send back after peer's SHUT_WR", send(p.s, "ok", 2, 0));
  show("client reads the reply", recv(p.c, buf, 2, MSG_WAITALL));
}

// shutdown(SHUT_RD) reads EOF; SHUT_RDWR also gives the peer EOF and forbids sending.
void shutdowns() {
  for (int how : {SHUT_RD, SHUT_RDWR}) {
    printf("shutdown(%s)\n", how == SHUT_RD ? "SHUT_RD" : "SHUT_RDWR");
    Pair p;
    char buf[4];
    show("shutdown", shutdown(p.c, how));
    if (how == SHUT_RDWR) show("peer recv", recv(p.s, buf, sizeof buf, 0));
    show("recv after it", recv(p.c, buf, sizeof buf, 0));
    if (how == SHUT_RD) continue;
    show("send after it", send(p.c, "x", 1, MSG_NOSIGNAL));
    show("shutdown 99", shutdown(p.c, 99));
  }
}

void close_after_burst() {
  puts("close after a burst: every byte, then EOF");
  Pair p;
  std::vector<char> data = pattern(3 << 20, 7, 3);
  std::thread t([&] {
    send_all(p.c, data.data(), data.size());
    close(p.c);
    p.c = -1;
  });
  std::vector<char> in(data.size() + 1);  // room for one byte too many
  size_t got = 0;
  for (;;) {
    long r = recv(p.s, in.data() + got, in.size() - got, 0);
    if (r <= 0) {
      show("final recv", r);
      break;
    }
    got += static_cast<size_t>(r);
  }
  t.join();
  bool same = got == data.size() && !memcmp(in.data(), data.data(), got);
  printf("  received %zu bytes, %s\n", got, same ? "identical" : "DIFFERENT");
}

void send_to_closed_peer() {
  puts("send to a closed peer: EPIPE with MSG_NOSIGNAL");
  Pair p;
  close(p.s);
  p.s = -1;
  char buf[4096] = {};
  long r = 0;
  int i = 0;
  for (; i < 200 && r >= 0; ++i) {
    r = send(p.c, buf, sizeof buf, MSG_NOSIGNAL);
    usleep(5000);
  }
  show("eventually", r);
}

// The rest of the I/O calls: read/write, sendto/recvfrom (a connected TCP socket gives
// no address), sendmsg/recvmsg, sendfile, SIOCINQ/SIOCOUTQ, SO_ERROR.
void other_calls() {
  puts("read/write, sendto/recvfrom, sendmsg/recvmsg, sendfile, ioctls, SO_ERROR");
  Pair p;
  char buf[64] = {};
  show("write 3", write(p.c, "abc", 3));
  show("read 3", read(p.s, buf, 3));
  show("sendto with no address", sendto(p.c, "defg", 4, 0, nullptr, 0));
  sockaddr_storage from;
  memset(&from, 0x55, sizeof from);
  socklen_t flen = sizeof from;
  show("recvfrom 4", recvfrom(p.s, buf, 4, MSG_WAITALL, reinterpret_cast<sockaddr*>(&from), &flen));
  printf("  recvfrom address length %u\n", flen);
  iovec out[2] = {{const_cast<char*>("hi"), 2}, {const_cast<char*>("jkl"), 3}};
  msghdr m{};
  m.msg_iov = out;
  m.msg_iovlen = 2;
  show("sendmsg 5", sendmsg(p.c, &m, 0));
  char x[2], y[8];
  iovec in[2] = {{x, 2}, {y, 3}};
  msghdr r{};
  r.msg_iov = in;
  r.msg_iovlen = 2;
  r.msg_flags = 0x7fff;
  show("recvmsg 5 MSG_WAITALL", recvmsg(p.s, &r, MSG_WAITALL));
  printf("  recvmsg got %.2s|%.3s, msg_flags %d, namelen %u\n", x, y, r.msg_flags, r.msg_namelen);
  char path[] = "/tmp/ferry-sendfile-XXXXXX";
  int f = mkstemp(path);
  unlink(path);
  std::vector<char> file = pattern(200000, 13, 1);
  (void)!::write(f, file.data(), file.size());
  off_t off = 1000;
  std::thread t([&] {
    std::vector<char> got(file.size() - 1000);
    show("recv the file MSG_WAITALL", recv(p.s, got.data(), got.size(), MSG_WAITALL));
    printf("  file bytes %s\n", memcmp(got.data(), file.data() + 1000, got.size()) ? "DIFFERENT" : "identical");
  });
  long sent = 0;
  while (sent < static_cast<long>(file.size() - 1000)) {
    long k = sendfile(p.c, f, &off, file.size() - 1000 - static_cast<size_t>(sent));
    if (k <= 0) break;
    sent += k;
  }
  t.join();
  printf("  sendfile sent %ld, offset now %ld\n", sent, static_cast<long>(off));
  close(f);
  usleep(200000);
  int inq = -1, outq = -1, err = -1;
  socklen_t elen = sizeof err;
  show("ioctl SIOCINQ", ioctl(p.s, SIOCINQ, &inq));
  show("ioctl SIOCOUTQ", ioctl(p.c, SIOCOUTQ, &outq));
  printf("  SIOCINQ %d, SIOCOUTQ %d\n", inq, outq);
  show("getsockopt SO_ERROR", getsockopt(p.c, SOL_SOCKET, SO_ERROR, &err, &elen));
  printf("  SO_ERROR %d\n", err);
}

// MSG_TRUNC on TCP discards: the count comes back, the buffer (even a null one) is not
// written. MSG_OOB with no urgent data is EINVAL.
void trunc_and_oob() {
  puts("MSG_TRUNC and MSG_OOB");
  Pair p;
  show("send 10", send(p.c, "0123456789", 10, 0));
  char buf[16];
  memset(buf, 'X', sizeof buf);
  show("recv 4 MSG_TRUNC|MSG_WAITALL", recv(p.s, buf, 4, MSG_TRUNC | MSG_WAITALL));
  printf("  buffer %.4s\n", buf);
  show("recv 2 MSG_TRUNC into null", recv(p.s, nullptr, 2, MSG_TRUNC | MSG_WAITALL));
  show("recv 4 MSG_WAITALL", recv(p.s, buf, 4, MSG_WAITALL));
  printf("  read %.4s\n", buf);
  show("recv MSG_OOB, none sent", recv(p.s, buf, 1, MSG_OOB | MSG_DONTWAIT));
  std::vector<char> big = pattern(3 << 20, 5, 1);
  std::thread t([&] { send_all(p.c, big.data(), big.size()); });
  show("recv 3 MiB MSG_TRUNC|MSG_WAITALL into null", recv(p.s, nullptr, big.size(), MSG_TRUNC | MSG_WAITALL));
  t.join();
}

// Urgent data (send MSG_OOB) in the middle of a stream: the receiver takes the urgent
// byte with MSG_OOB and the rest of the stream without it, in order.
void urgent_data() {
  puts("urgent data");
  Pair p;
  show("send 6", send(p.c, "abcdef", 6, 0));
  show("send 1 MSG_OOB", send(p.c, "!", 1, MSG_OOB));
  show("send 4", send(p.c, "ghij", 4, 0));
  usleep(300000);  // everything has arrived
  char oob = 0;
  show("recv MSG_OOB", recv(p.s, &oob, 1, MSG_OOB));
  printf("  urgent byte %c\n", oob);
  char buf[16] = {};
  printf("  stream: %zu bytes, %.10s\n", recv_upto(p.s, buf, 10), buf);
  show("send after", send(p.c, "kl", 2, 0));
  show("recv 2 MSG_WAITALL", recv(p.s, buf, 2, MSG_WAITALL));
  printf("  read %.2s\n", buf);
}

// SO_SNDTIMEO: a send to a peer that does not read returns what it queued (or EAGAIN);
// non-blocking writes stop at EAGAIN with partial counts; then every byte arrives.
void send_limits() {
  puts("SO_SNDTIMEO, O_NONBLOCK partial writes");
  Pair p;
  timeval tv{0, 300000};
  show("setsockopt SO_SNDTIMEO", setsockopt(p.c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv));
  std::vector<char> big = pattern(64 << 20, 31, 7);
  long first = send(p.c, big.data(), big.size(), 0);
  printf("  send with a timeout returned %s\n", first > 0 && first < static_cast<long>(big.size()) ? "a partial count" : "something else");
  show("fcntl O_NONBLOCK", fcntl(p.c, F_SETFL, fcntl(p.c, F_GETFL) | O_NONBLOCK));
  long sent = first;
  std::vector<char> in(big.size());
  std::thread reader([&] {
    size_t got = recv_upto(p.s, in.data(), in.size());
    printf("  received %zu bytes, %s\n", got, got == big.size() && !memcmp(in.data(), big.data(), got) ? "identical" : "DIFFERENT");
  });
  while (sent < static_cast<long>(big.size())) {
    long r = send(p.c, big.data() + sent, big.size() - static_cast<size_t>(sent), 0);
    if (r > 0) {
      sent += r;
    } else if (r < 0 && errno == EAGAIN) {
      usleep(1000);
    } else {
      break;
    }
  }
  reader.join();
  printf("  non-blocking writes sent %s\n", sent == static_cast<long>(big.size()) ? "everything" : "less");
}

// SIGPIPE: a send on a connection the peer closed raises it unless MSG_NOSIGNAL.
int g_sigpipes = 0;
void on_sigpipe(int) { ++g_sigpipes; }
void sigpipe() {
  puts("SIGPIPE after the peer closed");
  Pair p;
  signal(SIGPIPE, on_sigpipe);
  close(p.s);
  p.s = -1;
  char buf[4096] = {};
  long r = 0;
  for (int i = 0; i < 200 && r >= 0; ++i) {
    r = send(p.c, buf, sizeof buf, 0);
    usleep(5000);
  }
  show("eventually", r);
  printf("  SIGPIPE %s\n", g_sigpipes > 0 ? "raised" : "not raised");
  signal(SIGPIPE, SIG_IGN);
}

// A blocking receive interrupted by a signal: restarted under SA_RESTART, EINTR without.
void signal_during_recv(bool restart) {
  printf("signal during a blocking recv, %s\n", restart ? "SA_RESTART" : "no SA_RESTART");
  Pair p;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGUSR1, &sa, nullptr);
  pthread_t self = pthread_self();
  std::thread t([&] {
    usleep(200000);
    pthread_kill(self, SIGUSR1);
    usleep(200000);
    send(p.c, "late", 4, 0);
  });
  char buf[16] = {};
  long r = recv(p.s, buf, sizeof buf, 0);
  show("recv", r);
  if (r < 0) show("recv again", recv(p.s, buf, sizeof buf, 0));
  printf("  got %.4s\n", buf);
  t.join();
  signal(SIGUSR1, SIG_DFL);
}

// A blocking send that filled the peer's buffers, interrupted by a signal: it returns
// what it sent so far.
void signal_during_send() {
  puts("signal during a blocking send to a peer that does not read");
  Pair p;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, nullptr);
  std::vector<char> big(64 << 20, 'z');
  std::atomic<bool> returned{false};
  pthread_t self = pthread_self();
  std::thread t([&] {  // until the send returns: it must have blocked by then
    while (!returned) {
      usleep(300000);
      if (!returned) pthread_kill(self, SIGUSR1);
    }
  });
  long r = send(p.c, big.data(), big.size(), 0);
  returned = true;
  t.join();
  printf("  send returned %s\n", r > 0 && r < static_cast<long>(big.size()) ? "a partial count" : "something else");
  signal(SIGUSR1, SIG_DFL);
}

// The peer's process is killed (SIGKILL: no close of its own). Kernel TCP ends the
// connection if the peer had read everything, and resets it if it left bytes unread.
void peer_killed(bool leave_unread) {
  printf("peer process killed %s\n", leave_unread ? "with bytes unread" : "while waiting for data");
  sockaddr_in a;
  int l = fresh_listener(&a);
  int ready[2];
  if (pipe(ready) != 0) return;
  pid_t child = fork();
  if (child == 0) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) _exit(1);
    char b = 'h';
    send(c, &b, 1, 0);
    recv(c, &b, 1, 0);
    (void)!write(ready[1], "r", 1);
    if (leave_unread) {
      pause();
    } else {
      char buf[64];
      recv(c, buf, sizeof buf, 0);
    }
    _exit(0);
  }
  int s = accept(l, nullptr, nullptr);
  close(l);
  char x;
  recv(s, &x, 1, 0);
  send(s, &x, 1, 0);
  wait_upgraded(g_upgrades += 1);
  char r;
  (void)!read(ready[0], &r, 1);
  char buf[100] = {};
  if (leave_unread) show("send 100 bytes the peer never reads", send(s, buf, sizeof buf, 0));
  usleep(300000);  // the bytes landed; the peer sleeps in pause() or recv()
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  usleep(300000);  // its kernel's FIN or RST arrives
  show("recv", recv(s, buf, sizeof buf, 0));
  long w = 0;
  for (int i = 0; i < 100 && w >= 0; ++i) {
    w = send(s, buf, sizeof buf, MSG_NOSIGNAL);
    usleep(5000);
  }
  show("send, eventually", w);
  close(s);
  close(ready[0]);
  close(ready[1]);
}

// splice between a connection and pipes, both ways: the bytes, the counts, a full
// pipe, offsets refused on a socket, a non-blocking socket with nothing to read, and
// the end of the stream.
void splices() {
  puts("splice");
  Pair p;
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return;
  const auto data = pattern(200000, 13, 5);
  // The sending side: a pipe's bytes into the connection, 64 KiB at a time.
  size_t put = 0;
  while (put < 150000) {
    long w = write(in[1], data.data() + put, std::min<size_t>(65536, 150000 - put));
    if (w <= 0) break;
    long r = splice(in[0], nullptr, p.c, nullptr, static_cast<size_t>(w), 0);
    if (r != w) show("splice pipe -> socket", r);
    if (r <= 0) break;
    put += static_cast<size_t>(r);
  }
  printf("  pipe -> socket moved %zu\n", put);
  loff_t off = 0;
  show("splice with an offset on the socket", splice(in[0], nullptr, p.c, &off, 10, 0));
  show("splice socket -> socket", splice(p.s, nullptr, p.c, nullptr, 10, 0));
  // The receiving side: the connection into a pipe the program then reads.
  std::vector<char> got;
  char buf[65536];
  while (got.size() < put) {
    long r = splice(p.s, nullptr, out[1], nullptr, sizeof buf, 0);
    if (r <= 0) {
      show("splice socket -> pipe", r);
      break;
    }
    long k = read(out[0], buf, static_cast<size_t>(r));
    if (k != r) show("read what the splice put in the pipe", k);
    got.insert(got.end(), buf, buf + (k > 0 ? k : 0));
  }
  printf("  socket -> pipe moved %zu, %s\n", got.size(),
         got.size() == put && memcmp(got.data(), data.data(), put) == 0 ? "bytes match" : "BYTES DIFFER");
  show("splice with an offset from the socket", splice(p.s, &off, out[1], nullptr, 10, 0));
  // SPLICE_F_NONBLOCK is about the pipe; the socket's own flag decides whether to wait.
  fcntl(p.s, F_SETFL, O_NONBLOCK);
  show("non-blocking socket, nothing to read", splice(p.s, nullptr, out[1], nullptr, 10, 0));
  fcntl(p.s, F_SETFL, 0);
  // A full pipe takes nothing, and the bytes wait in the connection.
  send_all(p.c, data.data(), 3000);
  for (int n = 0; n < 3000;)  // all 3000 have arrived
    if (ioctl(p.s, FIONREAD, &n) != 0) break;
  fcntl(out[1], F_SETFL, O_NONBLOCK);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  while (write(out[1], buf, sizeof buf) > 0) {
  }
  show("splice into a full pipe", splice(p.s, nullptr, out[1], nullptr, 3000, SPLICE_F_NONBLOCK));
  while (read(out[0], buf, sizeof buf) > 0) {
  }
  fcntl(out[1], F_SETFL, 0);
  fcntl(out[0], F_SETFL, 0);
  show("the 3000 once it drained", splice(p.s, nullptr, out[1], nullptr, 3000, 0));
  long k = read(out[0], buf, sizeof buf);
  show("read them", k);
  printf("  the 3000 bytes: %s\n", k == 3000 && memcmp(buf, data.data(), 3000) == 0 ? "match" : "DIFFER");
  shutdown(p.c, SHUT_WR);
  show("splice at the end of the stream", splice(p.s, nullptr, out[1], nullptr, 10, 0));
  for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
}

// A connection on a fresh listener, nothing sent yet: the client's end in *c, the
// server's returned.
int fresh_connection(int* c) {
  sockaddr_in a;
  int l = fresh_listener(&a);
  *c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*c, reinterpret_cast<sockaddr*>(&a), sizeof a)) perror("connect");
  int s = accept(l, nullptr, nullptr);
  close(l);
  return s;
}

// Longer vector lists than ferry passes on in one part (64 vectors), in a connection's
// first calls (the kernel's, while its upgrade begins): a blocking writev sends them
// whole, and recvmsg with MSG_WAITALL fills them whole.
void long_vector_lists() {
  puts("writev and recvmsg MSG_WAITALL of 100 vectors, as first calls");
  int c = -1;
  int s = fresh_connection(&c);
  const std::vector<char> out = pattern(100 * 1000, 3, 7);
  std::vector<char> in(out.size());
  iovec ov[100], iv[100];
  for (int i = 0; i < 100; ++i) {
    ov[i] = {const_cast<char*>(out.data()) + i * 1000, 1000};
    iv[i] = {in.data() + i * 1000, 1000};
  }
  show("writev 100 x 1000", writev(c, ov, 100));
  timeval tv{5, 0};  // bytes that never came show as a short count, not a stuck test
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  msghdr m{};
  m.msg_iov = iv;
  m.msg_iovlen = 100;
  show("recvmsg MSG_WAITALL 100 x 1000", recvmsg(s, &m, MSG_WAITALL));
  printf("  %s\n", memcmp(in.data(), out.data(), out.size()) ? "DIFFERENT" : "the bytes sent");
  wait_upgraded(g_upgrades += 2);
  close(c);
  close(s);
}

// A client that sends its request and shuts its side down at once (before the upgrade
// settles, so the kernel carries the FIN), then reads a reply larger than the ring, and
// the server closes. Such a client can no longer prove through TCP that it holds the
// connection (core/conn/binding.h): its RDMA side goes, and the reply comes over TCP.
void request_then_shutdown() {
  puts("request, shutdown(SHUT_WR) at once, then a reply larger than the ring");
  int c = -1;
  int s = fresh_connection(&c);
  std::vector<char> reply = pattern(4 << 20, 5, 1);
  size_t n = 0;
  long eof = -2;
  std::thread t([&] {
    char req[8] = {};
    n = recv_upto(s, req, 7);
    char x;
    eof = recv(s, &x, 1, 0);
    send_all(s, reply.data(), reply.size());
    close(s);
  });
  show("send request", send(c, "request", 7, 0));
  show("shutdown SHUT_WR", shutdown(c, SHUT_WR));
  std::vector<char> in(reply.size() + 1);
  size_t got = 0;
  long r;
  while ((r = recv(c, in.data() + got, in.size() - got, 0)) > 0) got += static_cast<size_t>(r);
  t.join();
  printf("  server read %zu bytes, then %ld\n", n, eof);
  show("final recv", r);
  bool same = got == reply.size() && !memcmp(in.data(), reply.data(), got);
  printf("  received %zu bytes, %s\n", got, same ? "identical" : "DIFFERENT");
  close(c);
}

// The same, but the server reads only after its first look began the upgrade: the
// client's FIN went to the kernel before it, and its send side must not then cut over
// to a ring that never ends (the server's read would wait for a fin that never comes).
// The client cannot prove itself (its TCP side ended), so the connection never binds.
void shutdown_before_upgrade_settles() {
  puts("request, shutdown(SHUT_WR) at once, read only after the upgrade");
  int c = -1;
  int s = fresh_connection(&c);
  char x;
  show("server's first look, MSG_DONTWAIT", recv(s, &x, 1, MSG_DONTWAIT));  // the upgrade begins
  show("send request", send(c, "request", 7, 0));
  show("shutdown SHUT_WR", shutdown(c, SHUT_WR));
  timeval tv{10, 0};  // a hang shows as EAGAIN, not as a stuck test
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char req[8] = {};
  show("server reads the request", static_cast<long>(recv_upto(s, req, 7)));
  show("server reads the end", recv(s, &x, 1, 0));
  show("server replies", send(s, "reply", 5, 0));
  close(s);
  char in[8] = {};
  show("client reads the reply", static_cast<long>(recv_upto(c, in, 5)));
  show("client reads the end", recv(c, in, 1, 0));
  close(c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  g_ip = argv[1];
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  peek_then_read();
  waitall_across_pieces();
  nonblocking_flags();
  receive_timeout();
  options_from_listener();
  receive_low_water();
  vectors();
  shutdown_write_gives_eof();
  shutdowns();
  close_after_burst();
  request_then_shutdown();
  shutdown_before_upgrade_settles();
  long_vector_lists();
  send_to_closed_peer();
  other_calls();
  splices();
  trunc_and_oob();
  urgent_data();
  send_limits();
  sigpipe();
  signal_during_recv(true);
  signal_during_recv(false);
  signal_during_send();
  peer_killed(false);
  peer_killed(true);
  puts("done");
  return 0;
}
