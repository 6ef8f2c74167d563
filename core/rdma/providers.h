// Which rdma-core provider serves each RDMA device of this host, loaded before
// libibverbs looks for one.
//
// libibverbs finds a device's provider among the providers already registered, and
// only when one of the host's devices matches none of them does it load every provider
// its configuration names (17 on Debian, with their own libraries: about 85 mappings).
// Each mapping is a cost at every fork of the process and every exit of a forked child
// (page tables copied, destructors run, the mappings torn down): in the test bed a
// process with all providers mapped forks at 0.6 of the rate it has with rxe's alone.
// So ferry asks the kernel (RDMA netlink: each device's uverbs driver id) which
// providers the devices need and loads those first. When it cannot tell (no netlink, a
// driver id it does not know, a provider file it cannot find or load), it loads none,
// and libibverbs does what it always does: it costs mappings, never a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::providers {

// The rdma-core provider (its name in /etc/libibverbs.d) for a kernel driver id
// (enum rdma_driver_id), or null for an id ferry does not know.
const char* provider_for(uint32_t driver_id) noexcept;

// The payload of netlink attribute `type` in the attributes [p, p + len) (a message's
// payload: RDMA netlink messages have no family header), or null. *size gets its
// length. Malformed attributes end the walk.
const uint8_t* find_attr(const uint8_t* p, size_t len, uint16_t type, size_t* size) noexcept;

// The provider names the host's RDMA devices need, each once; false (and `out` is to be
// ignored) when some device's provider cannot be named.
bool needed(std::vector<std::string>& out, std::string& why);

// Loads, for each device present, its provider from `dir` (libibverbs's provider
// directory), before libibverbs's first device lookup. Says in the log what it did.
void load(const std::string& dir) noexcept;

}  // namespace ferry::providers
