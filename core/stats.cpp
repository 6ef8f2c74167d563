#include "core/stats.h"

#include <cstdio>

namespace ferry::stats {

constinit Counters g;

std::string format(const Counters& c) {
  std::string out;
  char line[192];
#define FERRY_STAT_LINE(name, desc)                                                      \
  snprintf(line, sizeof line, "  %-22s %14llu  # %s\n", #name,                           \
           static_cast<unsigned long long>(c.name.load(std::memory_order_relaxed)), desc); \
  out += line;
  FERRY_STATS_LIST(FERRY_STAT_LINE)
#undef FERRY_STAT_LINE
  return out;
}

void reset(Counters& c) noexcept {
#define FERRY_STAT_RESET(name, desc) c.name.store(0, std::memory_order_relaxed);
  FERRY_STATS_LIST(FERRY_STAT_RESET)
#undef FERRY_STAT_RESET
}

}  // namespace ferry::stats
