// Several threads on one connection, and the buffering programs rely on: prints one
// line per observable result; run plainly and under ferry (both ends in this process,
// connections on RDMA), the outputs must be identical. No result depends on timing:
// where a thread must be asleep in a call before another acts, the scenario waits long
// enough for that, and a defect shows as a different line or a hang (the harness's
// timeout), never as a slow figure.
//   thread_semantics IP
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/time.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "semantics_pair.h"

namespace {

using namespace semantics;

void settle() { usleep(300000); }  // long enough for a thread to be asleep in its call

uint8_t byte_at(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

// FNV-1a of a stream, fed piece by piece.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  }
};

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    long r = send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool send_all_fd(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    long r = write(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Reads until EOF or `limit` bytes; how many, and their digest.
size_t read_all(int fd, Digest& d, size_t limit = SIZE_MAX) {
  std::vector<uint8_t> buf(64 * 1024);
  size_t got = 0;
  while (got < limit) {
    long r = recv(fd, buf.data(), std::min(buf.size(), limit - got), 0);
    if (r <= 0) break;
    d.add(buf.data(), static_cast<size_t>(r));
    got += static_cast<size_t>(r);
  }
  return got;
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = byte_at(i);
  return v;
}

// A thread of its own, blocked in recv on fd until something comes; join() gives the
// result (errno in err).
struct BlockedRecv {
  long r = -2;
  int err = 0;
  std::thread t;
  explicit BlockedRecv(int fd)
      : t([this, fd] {
          char b[16];
          r = recv(fd, b, sizeof b, 0);
          err = errno;
        }) {}
  long join() {
    t.join();
    errno = err;
    return r;
  }
};

void shutdown_wakes_blocked_recv(int how, const char* name) {
  printf("shutdown(%s) from another thread wakes a blocked recv\n", name);
  Pair p;
  BlockedRecv blocked(p.s);
  settle();
  show("shutdown", shutdown(p.s, how));
  show("blocked recv", blocked.join());
  char b[4];
  show("recv after", recv(p.s, b, sizeof b, MSG_DONTWAIT));
}

void dontwait_beside_blocked_recv() {
  puts("recv(MSG_DONTWAIT) while another thread is blocked in recv");
  Pair p;
  BlockedRecv blocked(p.s);
  settle();
  char b[4];
  show("recv MSG_DONTWAIT", recv(p.s, b, sizeof b, MSG_DONTWAIT));
  show("send 5", send(p.c, "hello", 5, 0));
  show("blocked recv", blocked.join());
}

// A sender blocked on a full connection: another thread's MSG_DONTWAIT send returns at
// once (EAGAIN, or the byte when the kernel found room between the blocked sender's
// pieces); the reader then takes everything, in order.
void dontwait_beside_blocked_send() {
  puts("send(MSG_DONTWAIT) while another thread is blocked in send");
  Pair p;
  const size_t n = 64u << 20;  // more than any connection buffers
  std::vector<uint8_t> data = pattern(n);
  bool ok = false;
  std::thread t([&] { ok = send_all(p.c, data.data(), n); });
  settle();
  long r = send(p.c, "x", 1, MSG_DONTWAIT);
  printf("  send MSG_DONTWAIT returned without waiting: %s\n", r == 1 || (r < 0 && errno == EAGAIN) ? "yes" : "no");
  std::vector<uint8_t> in(n + 1);
  size_t k = 0;
  while (k < n + (r == 1)) {
    long g = recv(p.s, in.data() + k, n + 1 - k, 0);
    if (g <= 0) break;
    k += static_cast<size_t>(g);
  }
  t.join();
  // The stream is the blocked sender's bytes, with the other thread's byte (if sent)
  // somewhere between them.
  bool intact = k == n + (r == 1);
  for (size_t i = 0, j = 0, extra = r == 1; intact && i < k; ++i) {
    if (j < n && in[i] == data[j]) {
      ++j;
    } else if (extra && in[i] == 'x') {
      extra = 0;
    } else {
      intact = false;
    }
  }
  printf("  blocked send completed %d, reader got everything in order %d\n", ok, intact);
}

// shutdown(SHUT_WR) from another thread ends a blocked send: it reports the bytes it
// had queued (some, never all) and the peer reads exactly those, then EOF.
void shutdown_wakes_blocked_send() {
  puts("shutdown(SHUT_WR) from another thread wakes a blocked send");
  Pair p;
  const size_t n = 64u << 20;
  std::vector<uint8_t> data = pattern(n);
  long r = -2;
  int err = 0;
  std::thread t([&] {
    r = send(p.c, data.data(), n, MSG_NOSIGNAL);
    err = errno;
  });
  settle();
  show("shutdown SHUT_WR", shutdown(p.c, SHUT_WR));
  t.join();
  printf("  blocked send returned %s\n", r > 0 && static_cast<size_t>(r) < n ? "a partial count" : r < 0 ? strerrorname_np(err) : "everything");
  Digest want, got;
  size_t k = read_all(p.s, got);
  want.add(data.data(), k);
  printf("  reader got the sent count %d, intact %d\n", r > 0 && k == static_cast<size_t>(r), got.h == want.h);
}

// Two threads receive from one connection at once: every byte reaches exactly one of
// them.
void two_readers() {
  puts("two threads receive from one connection");
  Pair p;
  const size_t n = 4u << 20;
  std::vector<uint8_t> data = pattern(n);
  std::atomic<uint64_t> sum{0}, count{0};
  auto reader = [&] {
    std::vector<uint8_t> b(3000);
    for (;;) {
      long r = recv(p.s, b.data(), b.size(), 0);
      if (r <= 0) break;
      uint64_t s = 0;
      for (long i = 0; i < r; ++i) s += b[static_cast<size_t>(i)];
      sum += s;
      count += static_cast<uint64_t>(r);
    }
  };
  std::thread a(reader), b(reader);
  bool ok = send_all(p.c, data.data(), n);
  shutdown(p.c, SHUT_WR);
  a.join();
  b.join();
  uint64_t want = 0;
  for (uint8_t x : data) want += x;
  printf("  sent %d, received %llu bytes, byte sum matches %d\n", ok, static_cast<unsigned long long>(count.load()), sum.load() == want);
}

// Two threads send whole messages at once: each message arrives whole and each
// thread's messages in order.
void two_writers() {
  puts("two threads send on one connection");
  Pair p;
  const int per = 2000;
  const size_t len = 100;
  auto writer = [&](uint8_t id) {
    uint8_t m[len];
    for (int i = 0; i < per; ++i) {
      memset(m, id, len);
      memcpy(m + 1, &i, sizeof i);
      send_all(p.c, m, len);
    }
  };
  std::thread a(writer, 1), b(writer, 2);
  int next[3] = {0, 0, 0}, bad = 0;
  uint8_t m[len];
  for (int got = 0; got < 2 * per; ++got) {
    size_t have = 0;
    while (have < len) {
      long r = recv(p.s, m + have, len - have, 0);
      if (r <= 0) break;
      have += static_cast<size_t>(r);
    }
    int seq;
    memcpy(&seq, m + 1, sizeof seq);
    const uint8_t id = m[0];
    if (have != len || (id != 1 && id != 2) || m[len - 1] != id || seq != next[id]++) ++bad;
  }
  a.join();
  b.join();
  printf("  messages from each thread in order and whole: %d\n", bad == 0);
}

// Two threads blocked in recv with SO_RCVTIMEO: both time out.
void timeouts_in_two_threads() {
  puts("SO_RCVTIMEO in two blocked threads");
  Pair p;
  timeval tv{0, 300000};
  setsockopt(p.s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  long r[2];
  int e[2];
  auto reader = [&](int i) {
    char b[8];
    r[i] = recv(p.s, b, sizeof b, 0);
    e[i] = errno;
  };
  std::thread a(reader, 0), b(reader, 1);
  a.join();
  b.join();
  for (int i = 0; i < 2; ++i) {
    errno = e[i];
    show("recv", r[i]);
  }
}

// The client writes everything before it reads anything; the server echoes as it
// reads. Kernel TCP's buffers hold several MiB per direction, and programs rely on it.
void write_everything_then_read(size_t n) {
  printf("echo of %zu MiB written before it is read\n", n >> 20);
  Pair p;
  std::vector<uint8_t> data = pattern(n);
  std::thread echo([&] {
    std::vector<uint8_t> b(64 * 1024);
    for (;;) {
      long r = recv(p.s, b.data(), b.size(), 0);
      if (r <= 0 || !send_all(p.s, b.data(), static_cast<size_t>(r))) break;
    }
    shutdown(p.s, SHUT_WR);
  });
  bool ok = send_all(p.c, data.data(), n);
  shutdown(p.c, SHUT_WR);
  Digest want, got;
  want.add(data.data(), n);
  size_t k = read_all(p.c, got);
  echo.join();
  printf("  wrote all %d, read back %zu bytes, intact %d\n", ok, k, got.h == want.h);
}

// sendfile with no offset on a non-blocking socket that fills up: the file position
// moves by exactly what was sent, so a loop of such calls sends the file whole.
void sendfile_nonblocking_no_offset() {
  puts("sendfile with no offset on a non-blocking socket");
  Pair p;
  const size_t n = 8u << 20;
  std::vector<uint8_t> data = pattern(n);
  char path[] = "/tmp/ferry-threads-XXXXXX";
  int f = mkstemp(path);
  unlink(path);
  if (write(f, data.data(), n) != static_cast<long>(n)) perror("write");
  lseek(f, 0, SEEK_SET);
  Digest want, got;
  want.add(data.data(), n);
  size_t k = 0;
  std::thread reader([&] { k = read_all(p.s, got); });
  fcntl(p.c, F_SETFL, fcntl(p.c, F_GETFL) | O_NONBLOCK);
  size_t sent = 0;
  int eagains = 0;
  while (sent < n) {
    long r = sendfile(p.c, f, nullptr, n - sent);
    if (r > 0) {
      sent += static_cast<size_t>(r);
    } else if (r < 0 && errno == EAGAIN) {
      ++eagains;
      pollfd pf{p.c, POLLOUT, 0};
      poll(&pf, 1, 5000);
    } else {
      break;
    }
  }
  printf("  file position at the end %s\n", lseek(f, 0, SEEK_CUR) == static_cast<off_t>(n) ? "n" : "wrong");
  shutdown(p.c, SHUT_WR);
  reader.join();
  close(f);
  printf("  sent %zu, reader got %zu, intact %d\n", sent, k, got.h == want.h);
}

// SO_LINGER {1, 0} then close: the peer reads what was sent, then the reset, then EOF;
// its sends fail.
void linger_zero_resets() {
  puts("SO_LINGER {1, 0} then close: the peer sees a reset");
  Pair p;
  show("send 3", send(p.c, "abc", 3, 0));
  usleep(100000);
  linger lg{1, 0};
  show("setsockopt SO_LINGER {1, 0}", setsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
  show("close", close(p.c));
  p.c = -1;
  settle();
  pollfd pf{p.s, POLLIN | POLLOUT | POLLRDHUP, 0};
  show("poll", poll(&pf, 1, 1000));
  printf("  revents %#x\n", pf.revents);
  char b[8];
  show("recv", recv(p.s, b, sizeof b, 0));
  show("recv", recv(p.s, b, sizeof b, 0));
  show("recv", recv(p.s, b, sizeof b, 0));
  pf.revents = 0;
  show("poll", poll(&pf, 1, 1000));
  printf("  revents %#x\n", pf.revents);
  show("send", send(p.s, "x", 1, MSG_NOSIGNAL));
}

// fork while another thread is blocked in recv on the connection: the child's calls on
// the inherited socket return (what they return for a connection on RDMA may differ,
// so only that is printed), and the parent's connection goes on as if nothing happened.
void fork_beside_blocked_recv() {
  puts("fork while another thread is blocked in recv");
  Pair p;
  BlockedRecv blocked(p.s);
  settle();
  pid_t child = fork();
  if (child == 0) {
    char b[4];
    recv(p.s, b, sizeof b, MSG_DONTWAIT);
    close(p.s);
    close(p.c);
    _exit(0);
  }
  int status = -1;
  waitpid(child, &status, 0);
  printf("  child's calls returned %d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  show("send 5", send(p.c, "after", 5, 0));
  show("blocked recv", blocked.join());
  const size_t n = 1u << 20;
  std::vector<uint8_t> data = pattern(n);
  Digest want, got;
  want.add(data.data(), n);
  std::thread w([&] { send_all(p.s, data.data(), n); });
  size_t k = read_all(p.c, got, n);
  w.join();
  printf("  then 1 MiB back: %zu bytes, intact %d\n", k, got.h == want.h);
}

// The scenarios below jump out of calls from a SIGALRM handler: their helper threads
// never take it (a jump from another thread's stack is not the program's).
void block_alarm() {
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alrm, nullptr);
}

// A limit for hangs (120 s): past it, the scenario's line says it hung and the
// process ends (the outputs then differ).
struct Watchdog {
  std::atomic<bool> done{false};
  std::thread t;
  explicit Watchdog(const char* line)
      : t([this, line] {
          block_alarm();
          for (int i = 0; i < 1200 && !done.load(); ++i) usleep(100000);
          if (!done.load()) {
            puts(line);
            fflush(stdout);
            // Where every thread is, on stderr (kept beside the output), then the end. By
            // posix_spawn, which runs no fork handler (a hung thread may hold a lock one
            // would take).
            char cmd[160];
            snprintf(cmd, sizeof cmd,
                     "timeout 120 gdb -p %d -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)' >&2",
                     static_cast<int>(getpid()));
            char sh[] = "/bin/sh", c[] = "-c";
            char* argv[] = {sh, c, cmd, nullptr};
            pid_t pid;
            int status = 0;
            if (posix_spawn(&pid, sh, nullptr, nullptr, argv, environ) == 0) waitpid(pid, &status, 0);
            _exit(1);
          }
        }) {}
  ~Watchdog() {
    done = true;
    t.join();
  }
};

// A thread reading fd to its end; join() says whether the stream ended with "END!".
struct MarkerReader {
  bool marker = false;
  std::thread t;
  explicit MarkerReader(int fd)
      : t([this, fd] {
          block_alarm();
          std::vector<uint8_t> b(64 * 1024);
          char last[4] = {};
          for (;;) {
            const long n = recv(fd, b.data(), b.size(), 0);
            if (n <= 0) break;
            for (long i = 0; i < n; ++i) {
              memmove(last, last + 1, 3);
              last[3] = static_cast<char>(b[static_cast<size_t>(i)]);
            }
          }
          marker = memcmp(last, "END!", 4) == 0;
        }) {}
  bool join() {
    t.join();
    return marker;
  }
};

// A connection used at once, not waited on for its upgrade: the server sends one
// byte (so that both ends have used it), which finish() reads; then, before both close,
// it waits for the two ends to show upgraded (a connection closed first never upgrades,
// and how soon the handshake ends beside the program's calls is the machine's speed).
struct FreshPair {
  int c = -1, s = -1;
  FreshPair() {
    sockaddr_in a;
    int l = fresh_listener(&a);
    c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) perror("connect");
    s = accept(l, nullptr, nullptr);
    close(l);
    show("server's byte", send(s, "h", 1, 0));
  }
  void finish() {
    char h = 0;
    show("the server's byte", recv(c, &h, 1, 0));
    wait_upgraded(g_upgrades += 2);
    close(c);
    close(s);
  }
};

// A signal handler that leaves by siglongjmp (iperf3 ends so on SIGINT), 200 times
// while the main thread sends: the handler comes at any point of a send, and the
// connection and the process go on after it. The reader (SIGALRM blocked) sees the
// stream end with the marker sent after the last jump; a stuck send is a hang, told by
// the watchdog (120 s: a limit for hangs). Only this thread takes SIGALRM: a jump from
// another thread's stack is not the program's.
sigjmp_buf g_jump;
volatile sig_atomic_t g_jumps;
void jump_back(int) {
  g_jumps = g_jumps + 1;
  siglongjmp(g_jump, 1);
}

void jumps_out_of_send() {
  puts("a signal handler jumps out of sends 200 times, then the stream goes on");
  Pair p;
  // The other threads are born with SIGALRM blocked: it comes to this one only.
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alrm, nullptr);
  std::optional<Watchdog> watchdog(std::in_place, "  hung after the jumps");
  MarkerReader reader(p.s);
  struct sigaction sa {}, old {};
  sa.sa_handler = jump_back;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, &old);
  pthread_sigmask(SIG_UNBLOCK, &alrm, nullptr);
  static std::vector<uint8_t> data(256 * 1024, 'x');
  g_jumps = 0;
  const itimerval every{{0, 2000}, {0, 2000}}, off{};
  setitimer(ITIMER_REAL, &every, nullptr);
  sigsetjmp(g_jump, 1);
  while (g_jumps < 200) send(p.c, data.data(), data.size(), MSG_NOSIGNAL);
  // From here no jump: blocked, the timer stopped, one that came meanwhile dropped.
  pthread_sigmask(SIG_BLOCK, &alrm, nullptr);
  setitimer(ITIMER_REAL, &off, nullptr);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGALRM, &sa, nullptr);
  sigaction(SIGALRM, &old, nullptr);
  pthread_sigmask(SIG_UNBLOCK, &alrm, nullptr);
  show("send of the marker", send(p.c, "END!", 4, MSG_NOSIGNAL));
  show("shutdown", shutdown(p.c, SHUT_WR));
  const bool marker = reader.join();
  watchdog.reset();
  printf("  the stream ends with the marker: %d\n", marker);
}

// The same jump out of a send that is still asleep in the kernel: the client's first
// data, 64 MiB no connection buffers while its reader does not read (the server only
// sends a byte, so that both ends have used the connection), and after a second one
// SIGALRM that leaves the send by siglongjmp. The shutdown after it returns, and the
// reader, started then, sees the stream end with the marker sent after the jump.
sigjmp_buf g_once;
void jump_once(int) { siglongjmp(g_once, 1); }

void jump_out_of_first_send() {
  puts("a signal handler jumps out of the connection's first send, asleep in it");
  FreshPair p;
  std::optional<Watchdog> watchdog(std::in_place, "  hung after the jump");
  struct sigaction sa {}, old {};
  sa.sa_handler = jump_once;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, &old);
  const size_t n = 64u << 20;  // more than any connection buffers
  std::vector<uint8_t> data(n, 'x');
  const itimerval once{{0, 0}, {1, 0}}, off{};
  volatile int jumped = 0;
  if (sigsetjmp(g_once, 1) == 0) {
    setitimer(ITIMER_REAL, &once, nullptr);
    send(p.c, data.data(), n, MSG_NOSIGNAL);  // not reached: the reader has not begun
  } else {
    jumped = 1;
  }
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &old, nullptr);
  printf("  jumped out: %d\n", jumped);
  MarkerReader reader(p.s);
  show("send of the marker", send(p.c, "END!", 4, MSG_NOSIGNAL));
  show("shutdown", shutdown(p.c, SHUT_WR));
  const bool marker = reader.join();
  watchdog.reset();
  printf("  the stream ends with the marker: %d\n", marker);
  p.finish();
}

// Sends of nothing as a connection's first calls, blocking and not: the kernel
// returns 0 at once, whatever the connection's state.
void empty_first_sends() {
  puts("sends of 0 bytes as the connection's first calls");
  FreshPair p;
  std::optional<Watchdog> watchdog(std::in_place, "  hung in a send of 0 bytes");
  show("send of 0 bytes, MSG_DONTWAIT", send(p.c, "", 0, MSG_DONTWAIT));
  show("send of 0 bytes", send(p.c, "", 0, 0));
  iovec none{nullptr, 0};
  show("writev of an empty vector", writev(p.c, &none, 1));
  show("send of 5 bytes", send(p.c, "hello", 5, 0));
  char b[8];
  show("the server reads", recv(p.s, b, sizeof b, 0));
  watchdog.reset();
  p.finish();
}

// A connection's first data by splice from a pipe, 16 MiB while its reader waits a
// moment before reading (the server only sends a byte, so that both ends have used
// the connection): the splices wait for room in TCP, the connection may change
// transport meanwhile, and the reader gets every byte in order.
void splice_first() {
  puts("the connection's first data spliced from a pipe, 16 MiB to a late reader");
  FreshPair p;
  const size_t n = 16u << 20;
  std::vector<uint8_t> data = pattern(n);
  Digest want, got;
  want.add(data.data(), n);
  int pipefd[2];
  if (pipe(pipefd)) perror("pipe");
  std::thread filler([&] {
    send_all_fd(pipefd[1], data.data(), n);
    close(pipefd[1]);
  });
  size_t spliced = 0;
  std::thread splicer([&] {
    for (;;) {
      const long r = splice(pipefd[0], nullptr, p.c, nullptr, 1u << 20, 0);
      if (r <= 0) break;
      spliced += static_cast<size_t>(r);
    }
    shutdown(p.c, SHUT_WR);
  });
  settle();
  size_t k = read_all(p.s, got);
  filler.join();
  splicer.join();
  printf("  spliced %zu, reader got %zu bytes, intact %d\n", spliced, k, got.h == want.h);
  close(pipefd[0]);
  p.finish();
}

// A daemon that closes every descriptor but its connection's (a loop of close, then
// close_range and closefrom) and dup2s over low numbers: the connection goes on.
void close_everything_else() {
  puts("closing every other descriptor, then using the connection");
  Pair p;
  for (int fd = 3; fd < 1024; ++fd)
    if (fd != p.c && fd != p.s) close(fd);
  const int hi = std::max(p.c, p.s);
  show("close_range above the connection", close_range(static_cast<unsigned>(hi) + 1, ~0U, 0));
  closefrom(hi + 1);
  int f = open("/dev/null", O_WRONLY);
  for (int fd = hi + 1; fd < hi + 64; ++fd) dup2(f, fd);
  for (int fd = hi + 1; fd < hi + 64; ++fd) close(fd);
  close(f);
  const size_t n = 4u << 20;
  std::vector<uint8_t> data = pattern(n);
  Digest want, got_s, got_c;
  want.add(data.data(), n);
  std::thread w([&] { send_all(p.c, data.data(), n); });
  size_t ks = read_all(p.s, got_s, n);
  w.join();
  std::thread w2([&] { send_all(p.s, data.data(), n); });
  size_t kc = read_all(p.c, got_c, n);
  w2.join();
  printf("  4 MiB each way: %zu %zu bytes, intact %d %d\n", ks, kc, got_s.h == want.h, got_c.h == want.h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: thread_semantics IP\n");
    return 2;
  }
  g_ip = argv[1];
  g_port = 7900;
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  time_t start = time(nullptr);
  // THREADS_ONLY=NAME runs one scenario (for debugging).
  const char* only = getenv("THREADS_ONLY");
  auto run = [only](const char* name, auto f) {
    if (!only || !strcmp(only, name)) f();
  };
  run("shutdown_rdwr", [] { shutdown_wakes_blocked_recv(SHUT_RDWR, "SHUT_RDWR"); });
  run("shutdown_rd", [] { shutdown_wakes_blocked_recv(SHUT_RD, "SHUT_RD"); });
  run("dontwait_recv", dontwait_beside_blocked_recv);
  run("dontwait_send", dontwait_beside_blocked_send);
  run("shutdown_send", shutdown_wakes_blocked_send);
  run("two_readers", two_readers);
  run("two_writers", two_writers);
  run("timeouts", timeouts_in_two_threads);
  run("echo", [] { write_everything_then_read(4u << 20); });
  run("sendfile", sendfile_nonblocking_no_offset);
  run("linger", linger_zero_resets);
  run("fork", fork_beside_blocked_recv);
  run("jumps", jumps_out_of_send);
  run("jump_first", jump_out_of_first_send);
  run("splice_first", splice_first);
  run("empty_first", empty_first_sends);
  run("close_everything", close_everything_else);  // last: it closes what came before
  puts("done");
  fprintf(stderr, "%ld s\n", static_cast<long>(time(nullptr) - start));
  return 0;
}
