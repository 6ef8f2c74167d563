#include "core/rdma/rdma.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>

namespace ferry::rdma {
namespace {

// Whether [p, p + len) is mapped in this process: msync fails with ENOMEM on a range
// that is not.
bool mapped(const void* p, size_t len) {
  return msync(const_cast<void*>(p), len, MS_ASYNC) == 0 || errno != ENOMEM;
}

TEST(RdmaBuffer, WholeZeroedPagesOfItsOwn) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Buffer b = allocate(page + 100);
  ASSERT_TRUE(b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % page, 0u);
  EXPECT_EQ(b.get_deleter().bytes, 2 * page);  // the last page is the buffer's alone
  for (size_t i = 0; i < 2 * page; ++i) ASSERT_EQ(b.get()[i], 0) << i;
  b.get()[2 * page - 1] = 1;
}

// A forked child gets none of it (the kernel would otherwise copy every pinned page at
// fork); the parent keeps it whole.
TEST(RdmaBuffer, AForkedChildGetsNoneOfIt) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Buffer b = allocate(4 * page);
  ASSERT_TRUE(b);
  b.get()[0] = 7;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(mapped(b.get(), 4 * page) ? 1 : 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child has the buffer";
  EXPECT_TRUE(mapped(b.get(), 4 * page));
  EXPECT_EQ(b.get()[0], 7);
}

}  // namespace
}  // namespace ferry::rdma
