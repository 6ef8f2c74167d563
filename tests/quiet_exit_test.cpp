#include "core/base/quiet_exit.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace ferry::quiet_exit {
namespace {

TEST(QuietExit, NamesRdmaCoreLibrariesOnly) {
  EXPECT_TRUE(rdma_core("/usr/lib/x86_64-linux-gnu/libibverbs.so.1"));
  EXPECT_TRUE(rdma_core("/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.44.0"));
  EXPECT_TRUE(rdma_core("/usr/lib/x86_64-linux-gnu/libnl-3.so.200"));
  EXPECT_TRUE(rdma_core("/usr/lib/x86_64-linux-gnu/libnl-route-3.so.200"));
  EXPECT_TRUE(rdma_core("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"));
  EXPECT_TRUE(rdma_core("libibverbs.so.1"));
  EXPECT_FALSE(rdma_core("/usr/lib/x86_64-linux-gnu/libnl-genl-3.so.200"));
  EXPECT_FALSE(rdma_core("/usr/lib/x86_64-linux-gnu/libc.so.6"));
  EXPECT_FALSE(rdma_core("/usr/lib/x86_64-linux-gnu/libmlx5.so.1"));  // a provider's own library
  EXPECT_FALSE(rdma_core("/opt/app/lib/librxe-rdmav34.so"));          // not a provider directory
  EXPECT_FALSE(rdma_core("/usr/lib/x86_64-linux-gnu/libibverbs/README"));
  EXPECT_FALSE(rdma_core(""));
}

TEST(QuietExit, PlansTheTwoEntriesTheLinkerCallsAtExit) {
  ElfW(Dyn) dyn[] = {{DT_INIT, {0x1000}},       {DT_FINI, {0x2000}},         {DT_FINI_ARRAY, {0x3000}},
                     {DT_FINI_ARRAYSZ, {16}},   {DT_STRTAB, {0x4000}},       {DT_NULL, {0}},
                     {DT_FINI, {0x9999}}};  // after DT_NULL: not the object's
  const Patch p = plan(dyn, 0x7f0000000000, 0x7f0000005000);
  EXPECT_EQ(p.fini_at, reinterpret_cast<uintptr_t>(&dyn[1].d_un));
  EXPECT_EQ(p.fini_value, 0x5000u);
  EXPECT_EQ(p.array_size_at, reinterpret_cast<uintptr_t>(&dyn[3].d_un));
  // Below the base too: the linker's base + d_ptr wraps around.
  EXPECT_EQ(0x1000 + plan(dyn, 0x1000, 0x800).fini_value, 0x800u);
  ElfW(Dyn) bare[] = {{DT_STRTAB, {0x4000}}, {DT_NULL, {0}}};
  const Patch none = plan(bare, 0, 0x10);
  EXPECT_EQ(none.fini_at, 0u);
  EXPECT_EQ(none.array_size_at, 0u);
  EXPECT_EQ(plan(nullptr, 0, 0).fini_at, 0u);
}

bool probe(std::string_view path) { return path.find("libfini_probe.so") != std::string_view::npos; }

// What the probe library's destructors wrote when a child that loaded it (and
// silenced it when `quiet`, or had it loaded before looking when `loaded_before`)
// called exit().
std::string at_exit(bool quiet, bool loaded_before = false) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    void* h = nullptr;
    if (loaded_before) h = dlopen(FERRY_FINI_PROBE, RTLD_NOW | RTLD_LOCAL);
    Mapped before;
    if (!loaded_before) h = dlopen(FERRY_FINI_PROBE, RTLD_NOW | RTLD_LOCAL);
    if (!h) _exit(2);
    *static_cast<int*>(dlsym(h, "fini_probe_fd")) = fds[1];
    if (quiet && silence(before, probe) != (loaded_before ? 0 : 1)) _exit(4);
    exit(0);
  }
  close(fds[1]);
  std::string got;
  char c;
  while (read(fds[0], &c, 1) == 1) got += c;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child status " + std::to_string(status);
  return got;
}

TEST(QuietExit, ALoadedLibraryRunsBothDestructorsAtExit) { EXPECT_EQ(at_exit(false), "af"); }

TEST(QuietExit, ASilencedLibraryRunsNoneAtExit) { EXPECT_EQ(at_exit(true), ""); }

TEST(QuietExit, ALibraryMappedBeforeKeepsItsDestructors) { EXPECT_EQ(at_exit(true, true), "af"); }

}  // namespace
}  // namespace ferry::quiet_exit
