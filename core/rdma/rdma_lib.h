// rdma-core, loaded when a connection first needs it.
//
// libibverbs and librdmacm (and the libnl libraries they pull in) are not linked: a
// process that never reaches RDMA (no device, FERRY_DEVICES naming none, FERRY_ENABLE=0,
// every connection on loopback) never maps them. Mapped, they cost every forked child
// that exits (their destructors and lazily bound calls run in each), which a server
// forking a process per connection pays per connection. ferry's calls of the functions
// in core/rdma/rdma_functions.def go to local definitions that forward to the library.
// Before libibverbs first looks for devices, the providers of this host's devices are
// loaded (core/rdma/providers.h), so that it does not load all of them.
#pragma once

namespace ferry::rdma_lib {

// Whether this host has rdma_cm at all (its device node), without loading anything:
// false means load() would fail.
bool host_has_rdma() noexcept;

// Loads both libraries once (later calls return the first answer). False when this
// host has no rdma_cm device node or a library is missing; *why then says what.
bool load(const char** why = nullptr) noexcept;

// Keeps the libraries load() mapped from running destructors at exit
// (core/base/quiet_exit.h). load() calls it; call it again once libibverbs has listed the
// devices, which may have made it load providers of its own.
void silence_destructors() noexcept;

}  // namespace ferry::rdma_lib
