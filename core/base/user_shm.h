// Memory that one user's processes share through a file of ferry's (in /dev/shm), for
// tables whose worst content costs that user no more than acceleration: the file must
// be a regular file of this effective user that no one else may read or write, and
// that has no other name (a hard link another directory's owner could reach it by).
#pragma once

#include <cstddef>

namespace ferry::user_shm {

// Maps `size` bytes of the file at `path`, creating it (mode 0600) if there is none; a
// new file reads as zeros. nullptr unless the file passes the checks above.
void* map(const char* path, size_t size) noexcept;

}  // namespace ferry::user_shm
