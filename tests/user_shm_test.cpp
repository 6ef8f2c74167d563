#include "core/base/user_shm.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace ferry {
namespace {

struct Dir {
  char path[32] = "/tmp/user_shm_test.XXXXXX";
  Dir() { EXPECT_NE(mkdtemp(path), nullptr); }
  ~Dir() {
    std::string cmd = std::string("rm -rf ") + path;
    (void)system(cmd.c_str());
  }
  std::string at(const char* name) const { return std::string(path) + "/" + name; }
};

TEST(UserShm, MapsAFileOfItsOwnMode0600) {
  Dir d;
  const std::string p = d.at("t");
  void* m = user_shm::map(p.c_str(), 4096);
  ASSERT_NE(m, nullptr);
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  munmap(m, 4096);
}

// Anything another user could read or write, or reach by another name, is refused.
TEST(UserShm, RefusesFilesOthersCouldReach) {
  Dir d;
  const std::string open_to_all = d.at("open");
  int fd = open(open_to_all.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  fchmod(fd, 0666);
  close(fd);
  EXPECT_EQ(user_shm::map(open_to_all.c_str(), 4096), nullptr);

  const std::string linked = d.at("linked"), other = d.at("other-name");
  void* m = user_shm::map(linked.c_str(), 4096);
  ASSERT_NE(m, nullptr);
  munmap(m, 4096);
  ASSERT_EQ(link(linked.c_str(), other.c_str()), 0);  // a second name for the table
  EXPECT_EQ(user_shm::map(linked.c_str(), 4096), nullptr);
  EXPECT_EQ(user_shm::map(other.c_str(), 4096), nullptr);

  const std::string sym = d.at("sym");
  ASSERT_EQ(symlink(open_to_all.c_str(), sym.c_str()), 0);
  EXPECT_EQ(user_shm::map(sym.c_str(), 4096), nullptr);
}

}  // namespace
}  // namespace ferry
