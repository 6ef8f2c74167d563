// Helpers for the process tests, run under libferry.so.
//   process_helper daemon DIR   listens, calls daemon(); the daemon connects to the
//                               listener, exchanges bytes and writes "ok PID" to DIR/result
//   process_helper fdchaos DIR  finds ferry's descriptors, closes everything (a close
//                               loop to the limit, closefrom, close_range), dup2()s files
//                               over ferry's numbers, then does TCP work with epoll and
//                               poll next to files of its own, and checks that every file
//                               holds exactly what the program wrote
//   process_helper forkwrites DIR  holds a listener, a connection and an epoll set,
//                               forks (the child closes the listener and exits), and
//                               prints each page of libferry's data and bss the parent
//                               wrote in the fork (write-protected, each first write
//                               recorded); exits 0 when none
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

extern "C" int close_range(unsigned, unsigned, int);
extern "C" void closefrom(int);

namespace {

int fail(const char* what) {
  fprintf(stderr, "process_helper: %s: %s\n", what, strerror(errno));
  return 1;
}

int listener(sockaddr_in& a) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 8) ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len))
    return -1;
  return l;
}

// A connected pair through l; exchanges a message each way. True when all went well.
bool exchange(int l, const sockaddr_in& a, int& c, int& s) {
  c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<const sockaddr*>(&a), sizeof a)) return false;
  s = accept(l, nullptr, nullptr);
  char buf[8] = {};
  return send(c, "ping", 4, 0) == 4 && recv(s, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "ping", 4) &&
         send(s, "pong", 4, 0) == 4 && recv(c, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "pong", 4);
}

int run_daemon(const std::string& dir) {
  sockaddr_in a;
  int l = listener(a);
  if (l < 0) return fail("listen");
  if (daemon(1, 1) != 0) return fail("daemon");
  int c, s;
  bool ok = exchange(l, a, c, s);
  FILE* f = fopen((dir + "/result").c_str(), "w");
  if (!f) return fail("result");
  fprintf(f, "%s %ld\n", ok ? "ok" : "failed", static_cast<long>(getpid()));
  fclose(f);
  return ok ? 0 : 1;
}

// Descriptors open now (ferry's among them).
std::set<int> descriptors() {
  std::set<int> out;
  DIR* d = opendir("/proc/self/fd");
  int self = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != self) out.insert(fd);
  }
  closedir(d);
  return out;
}

bool is_open(int fd) { return syscall(SYS_fcntl, fd, F_GETFD) >= 0; }

// ferry's: open, yet not there for the program's calls.
std::set<int> ferrys() {
  std::set<int> out;
  for (int fd : descriptors())
    if (is_open(fd) && fcntl(fd, F_GETFD) == -1 && errno == EBADF) out.insert(fd);
  return out;
}

struct File {
  std::string path, want;
  int fd;
};

int run_fdchaos(const std::string& dir) {
  // An epoll set holding a TCP socket makes ferry open a descriptor of its own.
  sockaddr_in a;
  int l = listener(a);
  int c, s;
  if (l < 0 || !exchange(l, a, c, s)) return fail("first exchange");
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev)) return fail("epoll_ctl");
  // The loopback connection never leaves kernel TCP, so ferry keeps nothing for it; a
  // socket that may (a fresh one) makes the set open its kicker, which stays.
  int fresh = socket(AF_INET, SOCK_STREAM, 0);
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fresh, &ev) || epoll_ctl(ep, EPOLL_CTL_DEL, fresh, nullptr))
    return fail("epoll_ctl on a fresh socket");
  close(fresh);
  std::set<int> ferry = ferrys();
  if (ferry.size() < 2) {
    fprintf(stderr, "process_helper: expected ferry's log and kicker, found %zu descriptors\n", ferry.size());
    return 1;
  }
  for (int fd : ferry) {
    if (close(fd) != -1 || errno != EBADF) return fail("close of ferry's descriptor");
    if (dup(fd) != -1 || errno != EBADF) return fail("dup of ferry's descriptor");
  }
  std::vector<File> files;
  auto file_at = [&](int number) {
    File f{dir + "/file." + std::to_string(files.size()), "", -1};
    int fd = open(f.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    if (number >= 0 && fd != number) {
      if (dup2(fd, number) != number) return false;
      close(fd);
      fd = number;
    }
    f.fd = fd;
    files.push_back(f);
    return true;
  };
  auto write_all = [&](const char* tag) {
    for (File& f : files) {
      if (f.fd < 0) continue;  // closed by the program
      std::string line = std::string(tag) + " " + std::to_string(f.fd) + "\n";
      if (write(f.fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
      f.want += line;
    }
    return true;
  };
  // The program wants ferry's numbers: they become its files, ferry's move.
  for (int fd : ferry)
    if (!file_at(fd)) return fail("dup2 over ferry's descriptor");
  if (!write_all("over")) return fail("write over");
  // The epoll set still works (its kicker moved).
  char b = 'k';
  send(c, &b, 1, 0);
  epoll_event out[4];
  if (epoll_wait(ep, out, 4, 1000) != 1 || out[0].data.fd != s) return fail("epoll_wait after the move");
  recv(s, &b, 1, 0);

  // Everything closed, three ways.
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  for (int fd = 3; fd < static_cast<int>(rl.rlim_cur); ++fd) close(fd);
  closefrom(3);
  close_range(3, ~0U, 0);
  for (File& f : files) f.fd = -1;
  // What is left is ferry's: its log at least (the kicker went with the epoll set).
  std::set<int> left = ferrys();
  if (left.empty() || descriptors() != left) {
    fprintf(stderr, "process_helper: %zu of %zu descriptors left are ferry's\n", left.size(), descriptors().size());
    return 1;
  }
  // Files reuse the low numbers, and take ferry's numbers once more.
  size_t before = files.size();
  for (int i = 0; i < 40; ++i)
    if (!file_at(-1)) return fail("open");
  for (int fd : left)
    if (!file_at(fd)) return fail("dup2 over ferry's descriptor after closing");
  if (files.size() != before + 40 + left.size()) return fail("files");
  if (!write_all("after")) return fail("write after");
  for (int fd : descriptors())
    if (!is_open(fd)) return fail("descriptor list");

  // TCP work with epoll and poll, next to the files.
  l = listener(a);
  if (l < 0 || !exchange(l, a, c, s)) return fail("exchange after closing");
  ep = epoll_create1(0);
  ev.data.fd = s;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev)) return fail("epoll_ctl after closing");
  for (int i = 0; i < 100; ++i) {
    send(c, &b, 1, 0);
    if (epoll_wait(ep, out, 4, 1000) != 1) return fail("epoll_wait after closing");
    pollfd p{s, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return fail("poll after closing");
    recv(s, &b, 1, 0);
  }
  if (!write_all("end")) return fail("write end");
  for (File& f : files)
    if (f.fd >= 0) close(f.fd);
  for (File& f : files) {
    FILE* in = fopen(f.path.c_str(), "r");
    std::string got;
    char buf[4096];
    for (size_t n; in && (n = fread(buf, 1, sizeof buf, in)) > 0;) got.append(buf, n);
    if (in) fclose(in);
    if (got != f.want) {
      fprintf(stderr, "process_helper: %s holds \"%s\", wrote \"%s\"\n", f.path.c_str(), got.c_str(), f.want.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

// libferry's writable mappings, and the anonymous one right after them (its bss).
std::vector<std::pair<uintptr_t, uintptr_t>> ferry_data() {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  uintptr_t data_end = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8] = {};
    int path = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &path) < 3) continue;
    const bool ours = strstr(line + path, "libferry.so") != nullptr;
    const bool anon = line[path] == '\n' || line[path] == '\0';
    if (perms[1] == 'w' && (ours || (anon && lo == data_end))) out.emplace_back(lo, hi);
    data_end = ours && perms[1] == 'w' ? hi : 0;
  }
  if (f) fclose(f);
  return out;
}

// The pages of ranges the parent writes: each is write-protected, and the first write
// to one is recorded and let through (the child, which inherits the protection, is let
// through without a record).
std::vector<std::pair<uintptr_t, uintptr_t>> g_ranges;
uintptr_t g_written[64];
volatile sig_atomic_t g_nwritten = 0;
pid_t g_parent = 0;
uintptr_t g_page = 4096;

void on_write(int, siginfo_t* si, void*) {
  const uintptr_t page = reinterpret_cast<uintptr_t>(si->si_addr) & ~(g_page - 1);
  bool probed = false;
  for (const auto& r : g_ranges) probed = probed || (page >= r.first && page < r.second);
  if (!probed) {  // a real fault: let it kill
    signal(SIGSEGV, SIG_DFL);
    return;
  }
  if (getpid() == g_parent && g_nwritten < 64) {
    g_written[g_nwritten] = page;
    g_nwritten = g_nwritten + 1;
  }
  if (mprotect(reinterpret_cast<void*>(page), g_page, PROT_READ | PROT_WRITE) != 0) _exit(3);
}

int run_forkwrites() {
  sockaddr_in a;
  int l = listener(a), c, s;
  if (l < 0 || !exchange(l, a, c, s)) return fail("pair");
  // An epoll set too, watching the listener, as an event-loop server's parent has.
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = l;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev)) return fail("epoll");
  g_ranges = ferry_data();
  if (g_ranges.empty()) return fail("no data of libferry's mapped");
  g_parent = getpid();
  g_page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  struct sigaction sa = {};
  sa.sa_sigaction = on_write;
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGSEGV, &sa, nullptr)) return fail("sigaction");
  for (int round = 0; round < 3; ++round) {  // the first forks make what later ones reuse
    if (round == 2)
      for (const auto& r : g_ranges)
        if (mprotect(reinterpret_cast<void*>(r.first), r.second - r.first, PROT_READ)) return fail("mprotect");
    pid_t p = fork();
    if (p == 0) {
      close(l);
      exit(0);
    }
    int status;
    if (p < 0 || waitpid(p, &status, 0) != p || !WIFEXITED(status)) return fail("fork");
  }
  for (const auto& r : g_ranges) mprotect(reinterpret_cast<void*>(r.first), r.second - r.first, PROT_READ | PROT_WRITE);
  for (int i = 0; i < g_nwritten; ++i) printf("written: %lx\n", static_cast<unsigned long>(g_written[i]));
  printf("%d page(s) written of %zu range(s)\n", static_cast<int>(g_nwritten), g_ranges.size());
  return g_nwritten == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  std::string mode = argv[1], dir = argv[2];
  if (mode == "daemon") return run_daemon(dir);
  if (mode == "fdchaos") return run_fdchaos(dir);
  if (mode == "forkwrites") return run_forkwrites();
  return 2;
}
