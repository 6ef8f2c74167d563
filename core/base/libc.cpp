#include "core/base/libc.h"

#include "core/base/fork_path.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>

#include <type_traits>

namespace ferry {
namespace {

template <auto Slot, class R, class... A>
R first_call(A... args) {
  resolve_libc();
  return (real.*Slot)(args...);
}

// Stands in for a function the running libc does not have (epoll_pwait2 on an old
// glibc, say): the call fails the way a kernel without the syscall would.
template <class R, class... A>
R missing(A...) {
  errno = ENOSYS;
  if constexpr (std::is_pointer_v<R>)
    return reinterpret_cast<R>(-1L);  // SIG_ERR
  else
    return static_cast<R>(-1);
}

int first_fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  resolve_libc();
  return real.fcntl(fd, cmd, arg);
}

int first_ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  resolve_libc();
  return real.ioctl(fd, request, arg);
}

template <class F>
void resolve_one(F& slot, const char* name, F fallback) {
  void* sym = dlsym(RTLD_NEXT, name);
  slot = sym ? reinterpret_cast<F>(sym) : fallback;
}

pthread_once_t resolved = PTHREAD_ONCE_INIT;

void resolve_all() {
  Libc table{};
#define FERRY_LIBC(R, name, ...) \
  resolve_one(table.name, #name, &missing<R __VA_OPT__(, ) __VA_ARGS__>);
#include "core/base/libc_functions.def"
#undef FERRY_LIBC
  resolve_one(table.fcntl, "fcntl", &first_fcntl);
  resolve_one(table.ioctl, "ioctl", &first_ioctl);
  // Published slot by slot; a concurrent reader sees either the trampoline or the
  // final pointer, both of which work.
  real = table;
}

}  // namespace

void resolve_libc() noexcept { pthread_once(&resolved, resolve_all); }

// Cache lines of its own: every call reads it, and the fork page holds data that
// threads write (a thread's hazard record, the counters).
FERRY_FORK_DATA alignas(64) Libc real = {
#define FERRY_LIBC(R, name, ...) &first_call<&Libc::name, R __VA_OPT__(, ) __VA_ARGS__>,
#include "core/base/libc_functions.def"
#undef FERRY_LIBC
    &first_fcntl,
    &first_ioctl,
};

}  // namespace ferry
