#include "core/base/tcp_only.h"

#include "core/base/fork_path.h"

namespace ferry::tcp_only {

namespace detail {
FERRY_FORK_DATA std::atomic<uint8_t> g_why{0};
}

bool enter(Why w) noexcept { return !(detail::g_why.fetch_or(w, std::memory_order_acq_rel) & w); }

FERRY_FORK_PATH void after_fork_child() noexcept {
  if (why() & credentials) detail::g_why.fetch_and(static_cast<uint8_t>(~credentials), std::memory_order_relaxed);
}

}  // namespace ferry::tcp_only
