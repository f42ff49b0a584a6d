// Tests of run/capped_log.cc: evidence lines bounded after escaping, files cut at their limit
// with one `truncated` line and a count of what was left out (issue 37, item 4).
#include "run/capped_log.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <sstream>

namespace sandgate::run {
namespace {

boost::json::object parse(const std::string& line) { return boost::json::parse(line).as_object(); }

TEST(BoundedJsonLine, ShortLineIsUnchanged) {
  boost::json::object o{{"path", "/bin/true"}, {"argv", boost::json::array{"true"}}};
  EXPECT_EQ(boundedJsonLine(o), boost::json::serialize(o));
}

TEST(BoundedJsonLine, ControlBytesAreCountedEscaped) {
  // 64 arguments of 1,000 control bytes: 64 KB raw, 384 KB once each is \u0001.
  boost::json::array argv;
  for (int i = 0; i < 64; ++i) argv.emplace_back(std::string(1000, '\x01'));
  boost::json::object o{{"time", 1.5}, {"path", "/bin/true"}, {"argv", argv}, {"argv_cut", false}};
  std::string line = boundedJsonLine(o);
  EXPECT_LE(line.size(), kMaxEvidenceLineBytes);
  auto cut = parse(line);
  EXPECT_EQ(cut.at("line_cut"), true);
  EXPECT_EQ(cut.at("line_bytes").to_number<uint64_t>(), boost::json::serialize(o).size());
  EXPECT_EQ(cut.at("path"), "/bin/true");
  EXPECT_EQ(cut.at("time"), 1.5);
  const auto& kept = cut.at("argv").as_array();
  EXPECT_GT(kept.size(), 0u);  // as many of the first arguments as fit
  EXPECT_LT(kept.size(), 64u);
  EXPECT_EQ(kept[0].as_string().size(), 256u);  // each cut
}

TEST(BoundedJsonLine, CutNeverSplitsAUtf8Sequence) {
  std::string s = "x";
  for (int i = 0; i < 200; ++i) s += "\xc3\xa9";  // é: byte 256 is the second byte of one
  s += std::string(20000, 'x');
  std::string line = boundedJsonLine({{"path", s}});
  auto v = parse(line);
  const auto& p = v.at("path").as_string();
  EXPECT_EQ(p.size(), 255u);  // the é that 256 bytes would split is left out whole
  EXPECT_EQ(static_cast<unsigned char>(p.back()), 0xa9);
}

TEST(BoundedJsonLine, WhatCannotFitKeepsOnlySmallScalars) {
  boost::json::object o;
  for (int i = 0; i < 200; ++i) o["k" + std::to_string(i)] = std::string(300, '\x02');
  o["verdict"] = "deny";
  std::string line = boundedJsonLine(o, 4096);
  EXPECT_LE(line.size(), 4096u);
  auto v = parse(line);
  EXPECT_EQ(v.at("line_cut"), true);
  EXPECT_EQ(v.at("verdict"), "deny");
  EXPECT_FALSE(v.contains("k0"));
}

std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()))) > 0;) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(CappedLog, StopsAtTheLimitWithOneTruncatedLineAndCounts) {
  int fd = memfd_create("capped", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  int keep = dup(fd);
  CappedLog log(safe_open::UniqueFd(fd), 1000);
  const std::string line(99, 'a');  // 100 bytes with its newline
  for (int i = 0; i < 25; ++i) log.append(line);
  std::string text = readAll(keep);
  close(keep);
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 11u);  // ten fit, then the marker once
  EXPECT_EQ(lines[9], line);
  auto marker = parse(lines[10]);
  EXPECT_EQ(marker.at("truncated"), true);
  EXPECT_EQ(marker.at("limit_bytes").to_number<uint64_t>(), 1000u);
  EXPECT_LE(text.size(), 1000u + lines[10].size() + 1);
  EXPECT_TRUE(log.cut());
  EXPECT_EQ(log.linesLeftOut(), 15u);
}

TEST(CappedLog, UnderTheLimitIsNotCut) {
  int fd = memfd_create("capped", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  CappedLog log(safe_open::UniqueFd(fd), 1000);
  log.append("{}");
  EXPECT_FALSE(log.cut());
  EXPECT_EQ(log.linesLeftOut(), 0u);
}

}  // namespace
}  // namespace sandgate::run
