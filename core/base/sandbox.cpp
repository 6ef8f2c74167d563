#include "core/base/sandbox.h"

namespace ferry::sandbox {

namespace detail {
std::atomic<bool> g_on{false};
}

void enter() noexcept { detail::g_on.store(true, std::memory_order_relaxed); }

}  // namespace ferry::sandbox
