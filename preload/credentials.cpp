// The calls that change a process's credentials (core/base/tcp_only.h): once ferry
// opened rdma_cm and its devices, the kernel refuses their commands from a process
// whose credentials changed, so its connections go back to kernel TCP first. Then
// libc's own function runs.
#include "preload/export.h"

#include <errno.h>
#include <grp.h>
#include <sys/types.h>

namespace {


template <class F, class... A>
int change(F real, A... args) {
  ferry::api::before_credentials();
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(args...);
}

}  // namespace

// Each looks up libc's function once (a thread-safe static of its own).
#define FERRY_CREDENTIALS(name, params, ...)                 \
  FERRY_EXPORT int name params {                             \
    static const auto real = ferry::preload::next<int(*) params>(#name); \
    return change(real, __VA_ARGS__);                        \
  }

FERRY_CREDENTIALS(setuid, (uid_t u), u)
FERRY_CREDENTIALS(setgid, (gid_t g), g)
FERRY_CREDENTIALS(seteuid, (uid_t u), u)
FERRY_CREDENTIALS(setegid, (gid_t g), g)
FERRY_CREDENTIALS(setreuid, (uid_t r, uid_t e), r, e)
FERRY_CREDENTIALS(setregid, (gid_t r, gid_t e), r, e)
FERRY_CREDENTIALS(setresuid, (uid_t r, uid_t e, uid_t s), r, e, s)
FERRY_CREDENTIALS(setresgid, (gid_t r, gid_t e, gid_t s), r, e, s)
FERRY_CREDENTIALS(setgroups, (size_t n, const gid_t* list), n, list)
FERRY_CREDENTIALS(initgroups, (const char* user, gid_t g), user, g)
// setfsuid and setfsgid report the previous id, never an error.
FERRY_CREDENTIALS(setfsuid, (uid_t u), u)
FERRY_CREDENTIALS(setfsgid, (gid_t g), g)
FERRY_CREDENTIALS(capset, (void* header, const void* data), header, data)
