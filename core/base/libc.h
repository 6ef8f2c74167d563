// The real libc functions behind every interposed call.
//
// ferry never calls a socket function by its plain name: that would land in its own
// exports. It calls ferry::real.NAME(...), which points at the next definition in the
// lookup order (normally glibc). Until the first resolution every slot points at a
// trampoline that resolves the whole table and then forwards, so a call that arrives
// before ferry's constructor (from another library's constructor) still works, and
// the steady-state call has no "resolved yet?" branch.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace ferry {

struct Libc {
#define FERRY_LIBC(R, name, ...) R (*name)(__VA_ARGS__);
#include "core/base/libc_functions.def"
#undef FERRY_LIBC
  // Variadic in libc; their one optional argument is always a word.
  int (*fcntl)(int, int, ...);
  int (*ioctl)(int, unsigned long, ...);
};

// Resolved at most once; safe to call from any thread at any time.
void resolve_libc() noexcept;

extern Libc real;

}  // namespace ferry
