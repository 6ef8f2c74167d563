#include "core/base/generation.h"

#include "core/base/fork_path.h"

namespace ferry::forking {

FERRY_FORK_DATA std::atomic<uint32_t> g_generation{0};

}  // namespace ferry::forking
