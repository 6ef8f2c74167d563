// What every export shares: default visibility, and the one place where core's
// "-errno" convention becomes libc's "-1 and errno". On success errno is left as the
// caller had it.
#pragma once

#include "core/api/api.h"

#include <dlfcn.h>
#include <errno.h>

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

namespace ferry::preload {

// The next definition of `name` after libferry.so's own (another library's function
// that ferry exports too: liburing's, or one of libc's outside its table of real calls).
template <class F>
F next(const char* name) noexcept {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

class Errno {
 public:
  template <class T>
  T result(long r) noexcept {
    if (r < 0) {
      err() = static_cast<int>(-r);
      return static_cast<T>(-1);
    }
    if (err() != saved_) err() = saved_;  // a write only if needed: after a fork, it costs a page copy
    return static_cast<T>(r);
  }

 private:
  int saved_ = err();
};

}  // namespace ferry::preload

// return FERRY_RESULT(type, call): the errno on entry is taken before `call` runs.
#define FERRY_RESULT(T, call) ::ferry::preload::Errno{}.result<T>(::ferry::api::call)
