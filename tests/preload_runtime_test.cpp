// The preloaded library's own behaviour in a real process: crash backtraces that keep
// the exit status, descriptors of ferry's own that survive a program closing or
// dup2()ing over everything, and glibc's own forks (daemon()) getting a child of their
// own.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int status;
  std::string output;
};

Result run(const std::string& env, const std::string& arg, const char* helper = FERRY_CRASH_HELPER) {
  std::string cmd = "env " + env + " LD_PRELOAD=" FERRY_LIBRARY_PATH " " + helper + " " + arg + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r{-1, {}};
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  r.status = p ? pclose(p) : -1;
  return r;
}

// popen runs the command under sh, which reports a signal death as 128+N.
bool died_of(const Result& r, int sig) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 128 + sig; }

TEST(PreloadRuntime, BacktraceOnFatalSignalKeepsTheExitStatus) {
  Result r = run("FERRY_BACKTRACE=1", "segv");
  EXPECT_TRUE(died_of(r, SIGSEGV)) << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("fatal signal 11"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("crash_here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("main"), std::string::npos) << r.output;
}

// A process that never reaches RDMA maps no library for ferry: every forked child of a
// server pays at exit for each one mapped (core/rdma/rdma_lib.h, core/base/fork_path.h).
TEST(PreloadRuntime, MapsNoLibraryItDoesNotUse) {
  Result r = run("", "maps");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("libferry"), std::string::npos) << r.output;
  for (const char* lib : {"libibverbs", "librdmacm", "libnl-", "libunwind", "liblzma"})
    EXPECT_EQ(r.output.find(lib), std::string::npos) << lib << " mapped:\n" << r.output;
  r = run("FERRY_BACKTRACE=1", "maps");
  EXPECT_NE(r.output.find("libunwind"), std::string::npos) << "FERRY_BACKTRACE=1 loads it:\n" << r.output;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // libstdc++ is inside libferry.so: a C program (the helper is C++) maps none.
  r = run("", "/proc/self/maps", "/bin/cat");
  EXPECT_EQ(r.output.find("libstdc++"), std::string::npos) << r.output;
#endif
}

TEST(PreloadRuntime, NoBacktraceUnlessAsked) {
  Result r = run("", "segv");
  EXPECT_TRUE(died_of(r, SIGSEGV)) << r.status;
  EXPECT_EQ(r.output.find("fatal signal"), std::string::npos) << r.output;
}

TEST(PreloadRuntime, LogFileSurvivesAProgramThatClosesEverything) {
  char dir[] = "/tmp/ferry-log-test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string pattern = std::string(dir) + "/ferry.%p.log";
  Result r = run("FERRY_STATS=1 FERRY_LOG=info FERRY_LOG_FILE=" + pattern, "closeall");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.output;
  std::string listing;
  FILE* ls = popen((std::string("cat ") + dir + "/ferry.*.log").c_str(), "r");
  char buf[4096];
  for (size_t n; ls && (n = fread(buf, 1, sizeof buf, ls)) > 0;) listing.append(buf, n);
  pclose(ls);
  EXPECT_NE(listing.find("started"), std::string::npos) << listing;
  EXPECT_NE(listing.find("counters:"), std::string::npos) << listing;  // written at exit, after all the closing
  EXPECT_EQ(r.output.find("ferry["), std::string::npos) << r.output;  // nothing leaked onto the app's stdout
  system((std::string("rm -rf ") + dir).c_str());
}

// A program that installs a strict system-call filter (read, write, send, receive,
// close, memory, randomness, exit) after using a connection: ferry hands nothing over and makes
// none of its own calls from then on (core/base/sandbox.h), whatever FERRY_LOG and
// FERRY_STATS ask for. Without ferry the same filter lets the program through.
TEST(PreloadRuntime, AProgramUnderAStrictFilterIsNotKilled) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's runtime makes calls of its own (its checks, its reports, at exit) that
  // a strict filter does not allow, with or without ferry.
  GTEST_SKIP() << "the filter is the plain build's to test";
#endif
  for (const char* how : {"prctl", "syscall"}) {
    FILE* p = popen((std::string(FERRY_SANDBOX_HELPER " ") + how).c_str(), "r");
    char line[256];
    while (p && fgets(line, sizeof line, p)) {
    }
    const int plain = p ? pclose(p) : -1;
    ASSERT_TRUE(WIFEXITED(plain) && WEXITSTATUS(plain) == 0) << how << " without ferry: " << plain;
    Result r = run("FERRY_LOG=debug FERRY_STATS=1", how, FERRY_SANDBOX_HELPER);
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << how << ": " << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find("sandboxed: 5 bytes back"), std::string::npos) << r.output;
  }
}

// liburing's functions that create a ring are ferry's first (core/base/uring.h): each
// end of a loopback connection carried through io_uring, the other making plain calls,
// works under ferry as without it, and ferry saw the ring coming.
TEST(PreloadRuntime, AProgramWithAnIoUringRunsThroughFerry) {
  for (const char* modes : {"uring plain", "plain uring"}) {
    const std::string port = std::to_string(20000 + getpid() % 20000);
    const std::string m = modes, server = m.substr(0, m.find(' ')), client = m.substr(m.find(' ') + 1);
    const std::string pre = "env FERRY_LOG=info LD_PRELOAD=" FERRY_LIBRARY_PATH " " FERRY_URING_HELPER " ";
    const std::string cmd = "(" + pre + "serve 127.0.0.1 " + port + " " + server + " & " + pre + "connect 127.0.0.1 " +
                            port + " " + client + " 4194304; s=$?; wait $! && exit $s) 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = p ? pclose(p) : -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << modes << ": " << status << "\n" << out;
    EXPECT_NE(out.find("echoed 4194304 and 65536 bytes intact"), std::string::npos) << modes << "\n" << out;
    EXPECT_NE(out.find("served 2 connections"), std::string::npos) << modes << "\n" << out;
    EXPECT_NE(out.find("an io_uring instance"), std::string::npos) << modes << "\n" << out;
  }
}

TEST(PreloadRuntime, CountersPrintedWhenTheProcessEndsWithExit) {
  Result r = run("FERRY_STATS=1", "_exit");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 7) << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("counters:"), std::string::npos) << r.output;
  r = run("", "_exit");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 7) << r.status;
  EXPECT_EQ(r.output.find("counters:"), std::string::npos) << r.output;
}

// A shell's child that only runs a command (fork, then exec) counted nothing: it
// prints no counters of its own before the exec, and the command under ferry prints
// its own at its exit. Three blocks: the shell's and the two commands'.
TEST(PreloadRuntime, AChildThatOnlyExecsPrintsNoCountersOfItsOwn) {
  Result r = run("FERRY_STATS=1", "-c '/bin/true; /bin/true; echo done'", "/bin/sh");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.status << "\n" << r.output;
  size_t blocks = 0;
  for (size_t at = 0; (at = r.output.find("counters:", at)) != std::string::npos; ++at) ++blocks;
  EXPECT_EQ(blocks, 3u) << r.output;
}

TEST(PreloadRuntime, MalformedSettingGivesOneMessageAndTheProgramRuns) {
  Result r = run("FERRY_LOG=chatty FERRY_NOPE=1", "nothing");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2);  // the helper's own answer
  EXPECT_NE(r.output.find("malformed FERRY_LOG=\"chatty\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown setting FERRY_NOPE"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of one counter in a FERRY_STATS dump ("  name   value  # ..."), or -1.
long counter(const std::string& dump, const std::string& name) {
  size_t at = dump.find("  " + name + " ");
  return at == std::string::npos ? -1 : strtol(dump.c_str() + at + name.size() + 2, nullptr, 10);
}

struct TempDir {
  std::string path;
  TempDir() {
    char dir[] = "/tmp/ferry-process-test.XXXXXX";
    path = mkdtemp(dir) ? dir : "/tmp";
  }
  ~TempDir() { system(("rm -rf " + path).c_str()); }
};

// daemon() forks inside glibc, past ferry's fork export: the child still gets its own
// log, counters and sockets that work.
// A forked child opens its own log file (FERRY_LOG_FILE with %p) at its first write.
// One that cannot logs to stderr, as its parent does; it used to warn about the file
// through the log it was opening, and wait for itself for ever.
TEST(PreloadRuntime, AChildThatCannotOpenItsLogFileLogsToStderr) {
  // The child's stderr is not the pipe read here: a child that hangs must not hold it.
  Result r = run("FERRY_STATS=1 FERRY_LOG_FILE=/nonexistent-ferry-dir/ferry.%p.log",
                 "-c '(echo child >&2) >/dev/null 2>&1; echo done'", "timeout 20 /bin/sh");
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("counters:"), std::string::npos) << r.output;  // the shell's own, on stderr
  EXPECT_NE(r.output.find("cannot open FERRY_LOG_FILE"), std::string::npos) << r.output;
}

TEST(PreloadRuntime, DaemonChildIsSetUpLikeAForkedOne) {
  TempDir dir;
  Result r = run("FERRY_STATS=1 FERRY_LOG=info FERRY_LOG_FILE=" + dir.path + "/ferry.%p.log", "daemon " + dir.path,
                 FERRY_PROCESS_HELPER);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.output;
  std::string result;
  for (int i = 0; i < 100 && (result = slurp(dir.path + "/result")).find('\n') == std::string::npos; ++i) usleep(50000);
  ASSERT_EQ(result.rfind("ok ", 0), 0u) << result << r.output;
  long child = strtol(result.c_str() + 3, nullptr, 10);
  std::string log;
  for (int i = 0; i < 100 && (log = slurp(dir.path + "/ferry." + std::to_string(child) + ".log")).find("counters:") ==
                                  std::string::npos;
       ++i)
    usleep(50000);
  EXPECT_NE(log.find("ferry[" + std::to_string(child) + "] counters:"), std::string::npos) << log;
  // The child's own counts: its connection, not its parent's listener.
  EXPECT_EQ(counter(log, "listeners"), 0) << log;
  EXPECT_EQ(counter(log, "connections_active"), 1) << log;
  EXPECT_EQ(counter(log, "connections_passive"), 1) << log;
}

// A single-threaded process that forks (a forking server, a shell-out) writes no page
// of ferry's data in its own fork handlers: each such page is a copy-on-write fault
// after every fork. The child writes the fork page; the parent must not.
TEST(PreloadRuntime, ASingleThreadedParentWritesNoDataOfOursAtFork) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The probe write-protects the mappings next to libferry's data, and a sanitizer's
  // runtime then faults in them at the fork (the helper dies of SIGSEGV under ASan). It
  // is about the page layout of the library as shipped, which the plain build tests.
  GTEST_SKIP() << "the page probe runs on the plain build";
#endif
  Result r = run("", "forkwrites .", FERRY_PROCESS_HELPER);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.output;
  EXPECT_NE(r.output.find("0 page(s) written"), std::string::npos) << r.output;
}

// Every mapping with private pages costs each fork of the process more than a page in
// it does (the kernel copies its anon_vma chain), so ferry makes none of its own: each
// anonymous mapping of a program under ferry, but libferry's .bss (right after its
// data), is one the program has without ferry, of the same size. (The other way round
// is not asked: the dynamic linker's own may join ferry's .bss.)
TEST(PreloadRuntime, MapsNothingOfItsOwnButItsLibrary) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's runtime maps memory of its own; the plain build tests the layout";
#endif
  auto anonymous = [](const std::string& maps) {
    std::istringstream in(maps);
    std::multiset<unsigned long> sizes;
    bool after_data = false;
    for (std::string l; std::getline(in, l);) {
      unsigned long lo = 0, hi = 0;
      if (sscanf(l.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
      const bool ours = l.find("libferry.so") != std::string::npos;
      const bool anon = l.find('/') == std::string::npos && l.find('[') == std::string::npos;
      if (anon && !after_data) sizes.insert(hi - lo);
      after_data = ours && l.find(" rw") != std::string::npos;
    }
    return sizes;
  };
  FILE* p = popen("/bin/cat /proc/self/maps", "r");
  ASSERT_NE(p, nullptr);
  std::string plain;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) plain.append(buf, n);
  pclose(p);
  Result r = run("", "/proc/self/maps", "/bin/cat");
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_NE(r.output.find("libferry.so"), std::string::npos) << r.output;
  std::multiset<unsigned long> without = anonymous(plain);
  for (unsigned long size : anonymous(r.output)) {
    auto it = without.find(size);
    EXPECT_NE(it, without.end()) << "an anonymous mapping of " << size << " bytes of ferry's:\n" << r.output;
    if (it != without.end()) without.erase(it);
  }
}

// ferry's own log line (the counters at exit) to a stderr whose reader has gone must not
// end the program with SIGPIPE: without ferry it would have exited 0.
TEST(PreloadRuntime, ALogLineToAPipeNobodyReadsDoesNotEndTheProgram) {
  // The child's environment (this one's, with ferry preloaded and counting), made
  // before the fork: between fork and exec only async-signal-safe calls (setenv is not).
  char stats[] = "FERRY_STATS=1";
  char preload[] = "LD_PRELOAD=" FERRY_LIBRARY_PATH;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "FERRY_STATS=", 12) != 0 && strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  env.push_back(stats);
  env.push_back(preload);
  env.push_back(nullptr);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  close(p[0]);  // nobody reads
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    signal(SIGPIPE, SIG_DFL);  // whatever the test's runner left
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execle("/bin/true", "true", static_cast<char*>(nullptr), env.data());
    _exit(127);
  }
  close(p[1]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;  // not SIGPIPE
}

TEST(PreloadRuntime, OwnDescriptorsSurviveClosingAndDup2OverEverything) {
  TempDir dir;
  Result r = run("FERRY_STATS=1 FERRY_LOG=debug FERRY_LOG_FILE=" + dir.path + "/ferry.log", "fdchaos " + dir.path,
                 FERRY_PROCESS_HELPER);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.output;
  std::string log = slurp(dir.path + "/ferry.log");
  EXPECT_NE(log.find("started"), std::string::npos) << log;
  EXPECT_NE(log.find("counters:"), std::string::npos) << log;  // written at exit, after it all
  EXPECT_EQ(counter(log, "connections_active"), 2) << log;
  EXPECT_EQ(r.output.find("ferry["), std::string::npos) << r.output;
}

}  // namespace
