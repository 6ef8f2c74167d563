#include "core/rdma/rdma_lib.h"

#include "core/base/log.h"
#include "core/base/quiet_exit.h"
#include "core/rdma/providers.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <type_traits>

namespace ferry::rdma_lib {
namespace {

enum Index {
#define FERRY_RDMA(lib, version, R, name, params, args) k_##name,
#include "core/rdma/rdma_functions.def"
#undef FERRY_RDMA
  kCount
};

struct Entry {
  bool cm;  // librdmacm, else libibverbs
  const char* version;
  const char* name;
};
constexpr Entry kEntries[kCount] = {
#define FERRY_RDMA(lib, version, R, name, params, args) {__builtin_strcmp(#lib, "cm") == 0, version, #name},
#include "core/rdma/rdma_functions.def"
#undef FERRY_RDMA
};

std::atomic<void*> g_fn[kCount];

// The objects mapped before the libraries were loaded.
const quiet_exit::Mapped* g_before = nullptr;

struct Result {
  bool ok;
  const char* why;
};

Result open_libraries() noexcept {
  // librdmacm opens this node for every rdma_cm call ferry makes: without it, nothing
  // here could work, and the libraries stay unmapped.
  if (!host_has_rdma()) return {false, "no /dev/infiniband/rdma_cm"};
  g_before = new quiet_exit::Mapped;  // kept: silence_destructors() looks again later
  // RTLD_NOW: every call the libraries make is bound here, once, not again in each
  // forked child that first makes it.
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!verbs) return {false, "libibverbs.so.1 cannot be loaded"};
  // Its providers are in libibverbs/ beside it (rdma-core's layout).
  link_map* lm = nullptr;
  if (dlinfo(verbs, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
    const char* slash = strrchr(lm->l_name, '/');
    if (slash) providers::load(std::string(lm->l_name, static_cast<size_t>(slash - lm->l_name)) + "/libibverbs");
  }
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cm) return {false, "librdmacm.so.1 cannot be loaded"};
  void* found[kCount];
  for (int i = 0; i < kCount; ++i) {
    found[i] = dlvsym(kEntries[i].cm ? cm : verbs, kEntries[i].name, kEntries[i].version);
    if (!found[i]) return {false, "rdma-core lacks a function ferry calls"};
  }
  for (int i = 0; i < kCount; ++i) g_fn[i].store(found[i], std::memory_order_release);
  silence_destructors();
  return {true, nullptr};
}

// The function behind slot i, loading the libraries on first use; null if they cannot
// be loaded.
void* target(int i) noexcept {
  void* f = g_fn[i].load(std::memory_order_acquire);
  if (f || !load()) return f;
  return g_fn[i].load(std::memory_order_acquire);
}

// What a call returns when the libraries are missing: only the entry points
// (ibv_get_device_list, rdma_create_event_channel) can be reached then, and they fail.
template <class R>
R unavailable() noexcept {
  errno = ENOSYS;
  if constexpr (std::is_same_v<R, int>) return -1;
  else if constexpr (!std::is_void_v<R>) return R{};
}

}  // namespace

bool host_has_rdma() noexcept {
  static const bool present = access("/dev/infiniband/rdma_cm", F_OK) == 0;
  return present;
}

void silence_destructors() noexcept {
  if (!g_before) return;
  const int n = quiet_exit::silence(*g_before, quiet_exit::rdma_core);
  if (n < 0) FERRY_LOG(debug, "rdma", "rdma-core's destructors run at every exit (the kernel refused the change)");
  else FERRY_LOG(debug, "rdma", "%d of rdma-core's libraries run no destructors at exit", n);
}

bool load(const char** why) noexcept {
  static const Result r = open_libraries();
  if (why) *why = r.why;
  return r.ok;
}

}  // namespace ferry::rdma_lib

// Local to libferry (preload/exports.map exports none of them), so they never stand in
// for the program's own use of rdma-core.
#define FERRY_RDMA(lib, version, R, name, params, args)                                   \
  extern "C" R(name) params {                                                              \
    using Fn = R(*) params;                                                                \
    auto f = reinterpret_cast<Fn>(ferry::rdma_lib::target(ferry::rdma_lib::k_##name));     \
    if (!f) return ferry::rdma_lib::unavailable<R>();                                      \
    return f args;                                                                         \
  }
#include "core/rdma/rdma_functions.def"
#undef FERRY_RDMA
