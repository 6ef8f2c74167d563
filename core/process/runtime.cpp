#include "core/process/runtime.h"

#include "core/api/epoll_set.h"
#include "core/api/fdprobe.h"
#include "core/base/config.h"
#include "core/base/libc.h"
#include "core/base/log.h"
#include "core/base/rules.h"
#include "core/base/sandbox.h"
#include "core/base/stats.h"
#include "core/conn/fdtable.h"
#include "core/conn/handoff.h"
#include "core/conn/readiness.h"
#include "core/process/crash.h"
#include "core/process/forking.h"

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
  const bool secure = getauxval(AT_SECURE) != 0;
  set_config(parse_config(environ, problems, secure));
  const Config& c = config();
  log::open(c, getpid());
  for (const auto& p : problems) FERRY_LOG(warn, "config", "%s", p.c_str());
  if (!c.enable) {
    FERRY_LOG(info, "runtime", "FERRY_ENABLE=0: passthrough only");
    return;
  }
  problems.clear();
  rules::load(c.rules_file.c_str(), secure, problems);
  for (const auto& p : problems) FERRY_LOG(warn, "rules", "%s", p.c_str());
  // The tables' first leaves (fds from kLow to 1,023), made here rather than at first
  // use: a forked child (a server's worker) then shares them with its parent and
  // writes one page at its first bind, instead of making a top, a mid and a leaf.
  fd_table().reserve(FdTable::kLow);
  epoll_sets().reserve(FdTable::kLow);
  hazard::take_first();  // this thread's record, which its forked children inherit
  readiness::set_inherited_check(&handoff::carried);
  forking::install();
  if (c.backtrace) crash::install();
  adopt_open_fds();
  FERRY_LOG(info, "runtime", "started");
}

void finish() noexcept {
  if (!config().stats || sandbox::on()) return;
  if (stats::g.pid == 0) stats::g.pid = static_cast<uint64_t>(getpid());  // asked only now
  std::string text = stats::format(stats::g);
  log::write_raw(text.data(), text.size());
}

void finish_before_exec() noexcept {
  if (config().stats && !stats::all_zero(stats::g)) finish();
}

}  // namespace ferry::runtime
