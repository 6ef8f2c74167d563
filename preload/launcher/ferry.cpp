// ferry [--] PROGRAM [ARGS...]: runs PROGRAM with libferry.so preloaded.
#include "core/base/config.h"
#include "core/base/stats.h"
#include "processes.h"
#include "ss.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: ferry [--] PROGRAM [ARGS...]\n"
          "       ferry stat [--watch N] [PID...]\n"
          "                            the counters of running processes under ferry (every one\n"
          "                            of this user's when no PID is named, summed); with\n"
          "                            --watch, what grew every N seconds\n"
          "       ferry ss [-j] [PID...]\n"
          "                            every connection of running processes under ferry, one\n"
          "                            line each: RDMA or TCP and why, bytes on each path, memory\n"
          "                            registered (-j: JSON)\n"
          "       ferry --help | --version | --man\n\n"
          "Runs PROGRAM with libferry.so preloaded. A TCP connection whose two ends run ferry\n"
          "on an RDMA fabric moves to RDMA when the program uses it as a blocking socket;\n"
          "everything else stays on kernel TCP (see docs/compatibility.md).\n\n"
          "Settings are read from the environment (FERRY_NAME=value ferry PROGRAM):\n");
  for (const auto& s : ferry::setting_docs()) fprintf(out, "  %-25s default %-9s %s\n", s.name, s.fallback, s.help);
  fprintf(out, "\nThe library is found next to this program (or in ../lib); FERRY_LIBRARY overrides the path.\n");
}

// Text for roff: a backslash as \e, a hyphen as \-, a leading dot or quote escaped.
std::string roff(const char* text) {
  std::string out;
  for (const char* c = text; *c; ++c) {
    if (*c == '\\') out += "\\e";
    else if (*c == '-') out += "\\-";
    else if ((*c == '.' || *c == '\'') && (c == text || c[-1] == '\n')) out += std::string("\\&") + *c;
    else out += *c;
  }
  return out;
}

// The manual page ferry(1), made from the same table as --help: installed as
// share/man/man1/ferry.1 (preload/launcher/CMakeLists.txt).
void man() {
  printf(".TH FERRY 1 \"\" \"ferry 0.1.0\" \"User Commands\"\n"
         ".SH NAME\nferry \\- run a program with its TCP connections moved to RDMA\n"
         ".SH SYNOPSIS\n.B ferry\n[\\-\\-]\n.I program\n[\\fIargs\\fR...]\n.br\n"
         ".B ferry stat\n[\\-\\-watch \\fIn\\fR] [\\fIpid\\fR...]\n.br\n"
         ".B ferry ss\n[\\-j] [\\fIpid\\fR...]\n"
         ".SH DESCRIPTION\n"
         ".B ferry\nruns\n.I program\nwith libferry.so preloaded. A TCP connection whose two ends run ferry on an\n"
         "RDMA fabric moves its bytes to RDMA (rdma_cm, a ring buffer per direction); everything\n"
         "else, and any connection that cannot go on over RDMA, stays on (or goes back to) kernel\n"
         "TCP, byte for byte as the kernel would carry it. The program is not changed.\n"
         ".TP\n.B stat\nprints the counters of running processes under ferry: connections upgraded and kept\n"
         "on TCP (by reason), bytes over each path, memory registered. One\n.I pid\n"
         "prints that process's; several, or none (every process of this user, of every user for\n"
         "root), print their sum.\n.B \\-\\-watch\n.I n\nprints, every\n.I n\n"
         "seconds, what grew since the last reading. A program named stat runs as\n"
         ".BR \"ferry \\-\\- stat\" .\n"
         ".TP\n.B ss\nprints each connection of running processes under ferry (of the named\n.IR pid s,\n"
         "or of every process of this user), one line each: its role, ferry's state of it, the path its\n"
         "bytes take (rdma, tcp, or tcp>rdma while upgrading), the addresses and TCP state the kernel\n"
         "reports, why it is on TCP (the counter that counted it, as\n.B stat\nnames them), bytes sent\n"
         "and received on TCP (the kernel's) and over RDMA, the memory registered for it and its queue\n"
         "pair's number.\n"
         ".B \\-j\nprints the same as JSON. Connections of processes without a usable RDMA device are not\n"
         "listed; their counters say why.\n"
         ".SH ENVIRONMENT\nSettings are read from the environment\n"
         "(\\fBFERRY_\\fIname\\fB=\\fIvalue\\fB ferry \\fIprogram\\fR).\n"
         "A process running with secure execution (setuid, file capabilities) ignores them.\n");
  for (const auto& s : ferry::setting_docs())
    printf(".TP\n.B %s\n%s (default: %s)\n", s.name, roff(s.help).c_str(), roff(s.fallback).c_str());
  printf(".TP\n.B FERRY_LIBRARY\nthe library to preload, if not the one installed beside this program.\n"
         ".SH FILES\n.TP\n.I /etc/ferry/ferry.conf\nthe rules: which connections try RDMA; see\n.BR ferry.conf (5).\n"
         ".SH SEE ALSO\n.BR ferry.conf (5),\n.BR rdma_cm (7),\n.BR rxe (7)\n");
}

std::string find_library() {
  if (const char* forced = getenv("FERRY_LIBRARY"); forced && *forced) return forced;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  self[n] = '\0';
  std::string dir = dirname(self);
  for (const char* rel : {"/libferry.so", "/../lib/libferry.so", "/../lib/ferry/libferry.so"}) {
    std::string candidate = dir + rel;
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return {};
}

using ferry::launcher::processes_of_user;
using ferry::stats::Counters;

// to = from + k * by, counter by counter (k = 1: a sum, -1: a difference, kept >= 0:
// a process that ended between two readings takes its counts with it).
void combine(Counters& to, const Counters& from, const Counters& by, int k) {
  constexpr auto r = std::memory_order_relaxed;
#define FERRY_COMBINE(name, desc)                                                        \
  {                                                                                      \
    const uint64_t a = from.name.load(r), b = by.name.load(r);                           \
    to.name.store(k > 0 ? a + b : (a > b ? a - b : 0), r);                              \
  }
  FERRY_STATS_LIST(FERRY_COMBINE)
#undef FERRY_COMBINE
}

// The counters of `pids` (every ferry process of the user when empty), summed into
// `sum`: how many could be read. With named pids, each one that cannot is said.
size_t read_counters(const std::vector<long>& pids, Counters& sum) {
  static Counters zero, one;
  combine(sum, zero, zero, 1);
  size_t n = 0;
  const bool all = pids.empty();
  for (long pid : all ? processes_of_user() : pids) {
    const std::string error = ferry::stats::read_process(pid, one);
    if (!error.empty()) {
      if (!all) fprintf(stderr, "ferry stat: %s\n", error.c_str());
      continue;
    }
    combine(sum, sum, one, 1);
    ++n;
  }
  return n;
}

// The lines of format() after its header; without the zero ones if `nonzero`.
std::string counter_lines(const Counters& c, bool nonzero) {
  std::string text = ferry::stats::format(c), out;
  size_t at = text.find('\n') + 1;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at + 1);
    at = end + 1;
    unsigned long long v = 0;
    char name[64];
    if (nonzero && sscanf(line.c_str(), " %63s %llu", name, &v) == 2 && v == 0) continue;
    out += line;
  }
  return out;
}

// ferry stat [--watch N] [PID...]
int stat(int argc, char** argv, int at) {
  long watch = 0;
  std::vector<long> pids;
  for (; at < argc; ++at) {
    char* end = nullptr;
    if (!strcmp(argv[at], "--watch") && at + 1 < argc) {
      watch = strtol(argv[++at], &end, 10);
      if (!end || *end || watch <= 0 || watch > 86400) {
        fprintf(stderr, "ferry stat: --watch takes seconds (1-86400), not %s\n", argv[at]);
        return 2;
      }
      continue;
    }
    const long pid = strtol(argv[at], &end, 10);
    if (!end || *end || pid <= 0) {
      fprintf(stderr, "ferry stat: not a process id: %s\n", argv[at]);
      return 2;
    }
    pids.push_back(pid);
  }
  static Counters now, before, delta;
  size_t n = read_counters(pids, now);
  if (n < pids.size()) return 1;
  if (pids.size() == 1 && !watch) {
    now.pid = static_cast<uint64_t>(pids[0]);
    fputs(ferry::stats::format(now).c_str(), stdout);
    return 0;
  }
  if (!watch) {
    printf("ferry: %zu process%s, counters summed:\n%s", n, n == 1 ? "" : "es", counter_lines(now, false).c_str());
    return 0;
  }
  // Every N seconds, what grew since the last reading (counters that did not, left out).
  static const Counters zero;
  for (;;) {
    combine(before, now, zero, 1);
    sleep(static_cast<unsigned>(watch));
    n = read_counters(pids, now);
    if (!pids.empty() && n == 0) return 1;
    combine(delta, now, before, -1);
    const time_t t = time(nullptr);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
    printf("%s: the last %lds, %zu process%s:\n%s", when, watch, n, n == 1 ? "" : "es",
           counter_lines(delta, true).c_str());
    fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  if (first < argc && (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (first < argc && !strcmp(argv[first], "--man")) {
    man();
    return 0;
  }
  if (first < argc && !strcmp(argv[first], "--version")) {
    printf("ferry 0.1.0\n");
    return 0;
  }
  if (first < argc && !strcmp(argv[first], "stat")) return stat(argc, argv, first + 1);
  if (first < argc && !strcmp(argv[first], "ss")) return ferry::launcher::ss(argc, argv, first + 1);
  if (first < argc && !strcmp(argv[first], "--")) ++first;
  if (first >= argc) {
    usage(stderr);
    return 2;
  }
  std::string lib = find_library();
  if (lib.empty()) {
    fprintf(stderr, "ferry: cannot find libferry.so next to the ferry program; set FERRY_LIBRARY\n");
    return 127;
  }
  std::string preload = lib;
  if (const char* prior = getenv("LD_PRELOAD"); prior && *prior) preload += std::string(":") + prior;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  execvp(argv[first], argv + first);
  fprintf(stderr, "ferry: cannot run %s: %s\n", argv[first], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
