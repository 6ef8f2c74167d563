#include "core/base/config.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

Config parse(std::vector<const char*> env, std::vector<std::string>* problems_out = nullptr) {
  env.push_back(nullptr);
  std::vector<std::string> problems;
  Config c = parse_config(env.data(), problems);
  if (problems_out) *problems_out = problems;
  return c;
}

TEST(Config, DefaultsWithoutSettings) {
  std::vector<std::string> problems;
  Config c = parse({"PATH=/bin", "HOME=/root"}, &problems);
  EXPECT_TRUE(c.enable);
  EXPECT_EQ(c.log_level, LogLevel::warn);
  EXPECT_TRUE(c.log_file.empty());
  EXPECT_FALSE(c.backtrace);
  EXPECT_FALSE(c.stats);
  EXPECT_TRUE(problems.empty());
}

TEST(Config, ParsesEverySetting) {
  std::vector<std::string> problems;
  Config c = parse({"FERRY_ENABLE=0", "FERRY_LOG=debug", "FERRY_LOG_FILE=/tmp/f.%p.log", "FERRY_BACKTRACE=yes",
                    "FERRY_STATS=on"},
                   &problems);
  EXPECT_FALSE(c.enable);
  EXPECT_EQ(c.log_level, LogLevel::debug);
  EXPECT_EQ(c.log_file, "/tmp/f.%p.log");
  EXPECT_TRUE(c.backtrace);
  EXPECT_TRUE(c.stats);
  EXPECT_TRUE(problems.empty());
}

TEST(Config, LogLevelByNumberAndCase) {
  EXPECT_EQ(parse({"FERRY_LOG=5"}).log_level, LogLevel::trace);
  EXPECT_EQ(parse({"FERRY_LOG=0"}).log_level, LogLevel::off);
  EXPECT_EQ(parse({"FERRY_LOG=INFO"}).log_level, LogLevel::info);
}

TEST(Config, MalformedValueKeepsDefaultAndSaysSo) {
  std::vector<std::string> problems;
  Config c = parse({"FERRY_ENABLE=maybe", "FERRY_LOG=6", "FERRY_STATS="}, &problems);
  EXPECT_TRUE(c.enable);
  EXPECT_EQ(c.log_level, LogLevel::warn);
  EXPECT_FALSE(c.stats);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("FERRY_ENABLE=\"maybe\""), std::string::npos);
  EXPECT_NE(problems[1].find("FERRY_LOG"), std::string::npos);
}

TEST(Config, UnknownSettingIsReportedOnce) {
  std::vector<std::string> problems;
  parse({"FERRY_ENABLED=1", "FERRYX=1"}, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("unknown setting FERRY_ENABLED"), std::string::npos);
}

// A name or value with a newline must not write lines of its own into the log.
TEST(Config, ProblemsEscapeControlCharacters) {
  std::vector<std::string> problems;
  parse({"FERRY_X\nferry[1] error forged: line=1", "FERRY_LOG=warn\r\x7f"}, &problems);
  ASSERT_EQ(problems.size(), 2u);
  for (const auto& p : problems) {
    for (char ch : p) EXPECT_TRUE(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f) << p;
  }
  EXPECT_NE(problems[0].find("FERRY_X\\x0aferry[1]"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("warn\\x0d\\x7f"), std::string::npos) << problems[1];
}

// A setuid program's invoker chose its environment: FERRY_* counts for nothing there.
TEST(Config, SecureExecutionIgnoresEverySetting) {
  const char* env[] = {"FERRY_LOG_FILE=/etc/passwd", "FERRY_ENABLE=0", "FERRY_LOG=trace", nullptr};
  std::vector<std::string> problems;
  Config c = parse_config(env, problems, true);
  EXPECT_TRUE(c.log_file.empty());
  EXPECT_TRUE(c.enable);
  EXPECT_EQ(c.log_level, LogLevel::warn);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("ignored"), std::string::npos);
  const char* none[] = {"PATH=/bin", nullptr};
  problems.clear();
  parse_config(none, problems, true);
  EXPECT_TRUE(problems.empty());
}

TEST(Config, EmptyLogFileIsMalformed) {
  std::vector<std::string> problems;
  Config c = parse({"FERRY_LOG_FILE="}, &problems);
  EXPECT_TRUE(c.log_file.empty());
  EXPECT_EQ(problems.size(), 1u);
}

TEST(Config, LaterValueWins) {
  EXPECT_EQ(parse({"FERRY_LOG=error", "FERRY_LOG=info"}).log_level, LogLevel::info);
}

TEST(Config, LogPathExpansion) {
  EXPECT_EQ(expand_log_path("/tmp/ferry.%p.log", 42), "/tmp/ferry.42.log");
  EXPECT_EQ(expand_log_path("a%%p%", 7), "a%p%");
  EXPECT_EQ(expand_log_path("%p-%p", 1), "1-1");
  EXPECT_EQ(expand_log_path("plain", 1), "plain");
}

TEST(Config, EverySettingIsDocumented) {
  for (const auto& d : setting_docs()) {
    EXPECT_EQ(std::string(d.name).rfind("FERRY_", 0), 0u);
    EXPECT_GT(std::string(d.help).size(), 10u);
    std::vector<std::string> problems;
    std::string entry = std::string(d.name) + "=1";
    parse({entry.c_str()}, &problems);
    for (const auto& p : problems) EXPECT_EQ(p.find("unknown"), std::string::npos) << p;
  }
}

}  // namespace
}  // namespace ferry
