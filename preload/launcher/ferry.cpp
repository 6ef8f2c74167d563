// ferry [--] PROGRAM [ARGS...]: runs PROGRAM with libferry.so preloaded.
#include "core/base/config.h"
#include "core/base/stats.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: ferry [--] PROGRAM [ARGS...]\n"
          "       ferry stat PID       print the counters of a running process under ferry\n"
          "       ferry --help | --version\n\n"
          "Runs PROGRAM with libferry.so preloaded. A TCP connection whose two ends run ferry\n"
          "on an RDMA fabric moves to RDMA when the program uses it as a blocking socket;\n"
          "everything else stays on kernel TCP (see docs/compatibility.md).\n\n"
          "Settings are read from the environment (FERRY_NAME=value ferry PROGRAM):\n");
  for (const auto& s : ferry::setting_docs()) fprintf(out, "  %-25s default %-9s %s\n", s.name, s.fallback, s.help);
  fprintf(out, "\nThe library is found next to this program (or in ../lib); FERRY_LIBRARY overrides the path.\n");
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

int stat(const char* pid_text) {
  char* end = nullptr;
  long pid = strtol(pid_text, &end, 10);
  if (!end || *end || pid <= 0) {
    fprintf(stderr, "ferry stat: not a process id: %s\n", pid_text);
    return 2;
  }
  static ferry::stats::Counters counters;
  std::string error = ferry::stats::read_process(pid, counters);
  if (!error.empty()) {
    fprintf(stderr, "ferry stat: %s\n", error.c_str());
    return 1;
  }
  fputs(ferry::stats::format(counters).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  if (first < argc && (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (first < argc && !strcmp(argv[first], "--version")) {
    printf("ferry 0.1.0\n");
    return 0;
  }
  if (first + 1 < argc && !strcmp(argv[first], "stat")) return stat(argv[first + 1]);
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
