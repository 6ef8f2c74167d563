// Every wrapper, fed bad input, answers exactly as libc does: errno_cases runs once
// plainly and once with libferry.so preloaded, and every line must match.
#include <gtest/gtest.h>

#include <stdio.h>

#include <algorithm>

#include <string>

namespace {

std::string run(const std::string& env) {
  std::string cmd = env + " " FERRY_ERRNO_CASES " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = p ? pclose(p) : -1;
  EXPECT_EQ(status, 0) << out;
  return out;
}

std::string after_first_line(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? std::string() : s.substr(nl + 1);
}

TEST(WrapperErrno, SameResultsAsLibcForEveryBadInput) {
  std::string plain = run("env -u LD_PRELOAD");
  std::string shim = run("env LD_PRELOAD=" FERRY_LIBRARY_PATH);
  ASSERT_EQ(plain.rfind("interposed 0 of ", 0), 0u) << plain;
  ASSERT_EQ(shim.rfind("interposed 50 of 50", 0), 0u) << shim;
  EXPECT_GT(std::count(plain.begin(), plain.end(), '\n'), 100);
  EXPECT_EQ(after_first_line(plain), after_first_line(shim));
}

TEST(WrapperErrno, PassthroughModeMatchesToo) {
  std::string plain = run("env -u LD_PRELOAD");
  std::string off = run("env FERRY_ENABLE=0 LD_PRELOAD=" FERRY_LIBRARY_PATH);
  EXPECT_EQ(after_first_line(plain), after_first_line(off));
}

}  // namespace
