// Which fork of the process ferry started in this one is: 0 there, and one more than
// its parent's in each forked child. Written only by the child's fork handler
// (core/process/forking.cpp), in the data a forked child writes anyway.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::forking {

extern std::atomic<uint32_t> g_generation;
inline uint32_t generation() noexcept { return g_generation.load(std::memory_order_relaxed); }

}  // namespace ferry::forking
