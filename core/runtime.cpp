#include "core/runtime.h"

#include "core/config.h"
#include "core/crash.h"
#include "core/epoll_set.h"
#include "core/fdprobe.h"
#include "core/fdtable.h"
#include "core/forking.h"
#include "core/libc.h"
#include "core/log.h"
#include "core/stats.h"

#include <sys/auxv.h>
#include <unistd.h>

extern char** environ;

namespace ferry::runtime {

void start() noexcept {
  static bool started = false;
  if (started) return;
  started = true;
  resolve_libc();
  std::vector<std::string> problems;
  set_config(parse_config(environ, problems, getauxval(AT_SECURE) != 0));
  const Config& c = config();
  log::open(c, getpid());
  for (const auto& p : problems) FERRY_LOG(warn, "config", "%s", p.c_str());
  if (!c.enable) {
    FERRY_LOG(info, "runtime", "FERRY_ENABLE=0: passthrough only");
    return;
  }
  // The tables' first leaves (fds from kLow to 1,023), made here rather than at first
  // use: a forked child (a server's worker) then shares them with its parent and
  // writes one page at its first bind, instead of making a top, a mid and a leaf.
  fd_table().reserve(FdTable::kLow);
  epoll_sets().reserve(FdTable::kLow);
  hazard::take_first();  // this thread's record, which its forked children inherit
  forking::install();
  if (c.backtrace) crash::install();
  adopt_open_fds();
  FERRY_LOG(info, "runtime", "started");
}

void finish() noexcept {
  if (!config().stats) return;
  if (stats::g.pid == 0) stats::g.pid = static_cast<uint64_t>(getpid());  // asked only now
  std::string text = stats::format(stats::g);
  log::write_raw(text.data(), text.size());
}

void finish_before_exec() noexcept {
  if (config().stats && !stats::all_zero(stats::g)) finish();
}

void after_fork_child() noexcept {
  if (config().enable) stats::after_fork_child();
  log::reopen_after_fork(config());
}

}  // namespace ferry::runtime
