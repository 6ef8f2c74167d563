// liburing's functions that create an io_uring instance (core/base/tcp_only.h). liburing
// makes its system calls itself, so these are where a ring can be seen coming: the
// process's connections go back to kernel TCP first, then liburing's own function runs.
// A program that does not load liburing never calls them.
#include "preload/export.h"

#include <errno.h>
#include <stddef.h>

using ferry::preload::next;

// Each looks liburing's function up once.
FERRY_EXPORT int io_uring_queue_init(unsigned entries, void* ring, unsigned flags) {
  ferry::api::before_io_uring();
  static const auto f = next<int (*)(unsigned, void*, unsigned)>("io_uring_queue_init");
  return f ? f(entries, ring, flags) : -ENOSYS;
}

FERRY_EXPORT int io_uring_queue_init_params(unsigned entries, void* ring, void* params) {
  ferry::api::before_io_uring();
  static const auto f = next<int (*)(unsigned, void*, void*)>("io_uring_queue_init_params");
  return f ? f(entries, ring, params) : -ENOSYS;
}

FERRY_EXPORT int io_uring_queue_init_mem(unsigned entries, void* ring, void* params, void* buf, size_t size) {
  ferry::api::before_io_uring();
  static const auto f = next<int (*)(unsigned, void*, void*, void*, size_t)>("io_uring_queue_init_mem");
  return f ? f(entries, ring, params, buf, size) : -ENOSYS;
}

FERRY_EXPORT int io_uring_setup(unsigned entries, void* params) {
  ferry::api::before_io_uring();
  static const auto f = next<int (*)(unsigned, void*)>("io_uring_setup");
  return f ? f(entries, params) : -ENOSYS;
}
