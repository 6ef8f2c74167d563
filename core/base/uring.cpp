#include "core/base/uring.h"

namespace ferry::uring {

namespace detail {
std::atomic<bool> g_seen{false};
}

bool saw() noexcept { return !detail::g_seen.exchange(true, std::memory_order_acq_rel); }

}  // namespace ferry::uring
