// Memory a forked child takes instead of allocating: its fork handler allocates
// nothing (core/process/forking.h says why).
#pragma once

#include <new>

namespace ferry::forking {

// One fresh T, made in the parent ahead of each fork for the child to take. The parent
// keeps an untaken one for its next fork.
template <class T>
class Spare {
 public:
  // Before the fork (the prepare handler).
  void make() noexcept {
    if (!t_) t_ = new (std::nothrow) T;
  }
  // In the child.
  T* take() noexcept {
    T* t = t_;
    t_ = nullptr;
    return t ? t : new T;
  }

 private:
  T* t_ = nullptr;
};

}  // namespace ferry::forking
