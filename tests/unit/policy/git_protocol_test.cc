// The receive-pack command-list parser and the report-status refusal (policy/git_protocol.h).
#include "policy/git_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sandgate::policy {
namespace {

const std::string kA(40, 'a');
const std::string kB(40, 'b');
const std::string kZero(40, '0');

std::string cmd(const std::string& oldId, const std::string& newId, const std::string& ref) {
  return oldId + " " + newId + " " + ref;
}

// What git 2.39 sends for `git push origin HEAD:refs/heads/agent/x` over HTTP, then a pack.
std::string typicalPush() {
  return pktLine(cmd(kA, kB, "refs/heads/agent/x") + std::string(1, '\0') +
                 " report-status side-band-64k quiet object-format=sha1 agent=git/2.39.5") +
         "0000" + "PACK\x00\x00\x00\x02";
}

TEST(GitPushParser, ReadsTheCommandsAndCapabilitiesOfATypicalPush) {
  const std::string body = typicalPush();
  auto p = parsePushCommands(body, 65536);
  ASSERT_EQ(p.status, PushCommands::Status::kCommands) << p.error;
  ASSERT_EQ(p.commands.size(), 1u);
  EXPECT_EQ(p.commands[0].oldId, kA);
  EXPECT_EQ(p.commands[0].newId, kB);
  EXPECT_EQ(p.commands[0].ref, "refs/heads/agent/x");
  EXPECT_FALSE(p.commands[0].isDelete());
  EXPECT_TRUE(p.hasCapability("report-status"));
  EXPECT_TRUE(p.hasCapability("side-band-64k"));
  EXPECT_FALSE(p.hasCapability("push-options"));
  // Everything up to and including the flush, not a byte of the pack.
  EXPECT_EQ(p.consumed, body.find("PACK"));
}

TEST(GitPushParser, NeedsMoreUntilTheFlushAtEveryCut) {
  const std::string body = typicalPush();
  const size_t end = body.find("PACK");
  for (size_t cut = 0; cut < end; ++cut) {
    auto p = parsePushCommands(std::string_view(body).substr(0, cut), 65536);
    EXPECT_EQ(p.status, PushCommands::Status::kNeedMore) << "cut at " << cut << ": " << p.error;
  }
  EXPECT_EQ(parsePushCommands(std::string_view(body).substr(0, end), 65536).status,
            PushCommands::Status::kCommands);
}

TEST(GitPushParser, SeveralCommandsDeletesCreatesShallowAndPushOptions) {
  const std::string body = pktLine("shallow " + kA + "\n") +
                           pktLine(cmd(kZero, kB, "refs/heads/new") + std::string(1, '\0') +
                                   "report-status-v2 push-options") +
                           pktLine(cmd(kA, kZero, "refs/heads/old") + "\n") +
                           pktLine(cmd(kA, kB, "refs/tags/v1")) + "0000" + pktLine("ci.skip\n") +
                           pktLine("reviewer=x") + "0000" + "PACK";
  auto p = parsePushCommands(body, 65536);
  ASSERT_EQ(p.status, PushCommands::Status::kCommands) << p.error;
  ASSERT_EQ(p.commands.size(), 3u);
  EXPECT_TRUE(p.commands[0].isCreate());
  EXPECT_TRUE(p.commands[1].isDelete());
  EXPECT_EQ(p.commands[1].ref, "refs/heads/old");  // the trailing LF is not part of the ref
  EXPECT_EQ(p.commands[2].ref, "refs/tags/v1");
  EXPECT_EQ(p.pushOptions, (std::vector<std::string>{"ci.skip", "reviewer=x"}));
  EXPECT_EQ(p.consumed, body.size() - 4);
}

TEST(GitPushParser, AcceptsSha256Ids) {
  const std::string a(64, 'c'), b(64, 'd');
  auto p = parsePushCommands(pktLine(cmd(a, b, "refs/heads/x")) + "0000", 1024);
  ASSERT_EQ(p.status, PushCommands::Status::kCommands) << p.error;
  EXPECT_EQ(p.commands[0].newId, b);
}

TEST(GitPushParser, AFlushAloneIsAPushWithoutCommands) {
  // git sends "0000" alone as a probe before a pack larger than http.postBuffer.
  auto p = parsePushCommands("0000", 65536);
  ASSERT_EQ(p.status, PushCommands::Status::kCommands);
  EXPECT_TRUE(p.commands.empty());
  EXPECT_EQ(p.consumed, 4u);
}

TEST(GitPushParser, RefusesWhatItCannotRead) {
  struct Case {
    const char* name;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"length not hex", "00zz" + cmd(kA, kB, "refs/heads/x")},
      {"delimiter packet", "0001"},
      {"length below four", "0003"},
      {"two fields", pktLine(kA + " " + kB) + "0000"},
      {"short id", pktLine(cmd("abc", kB, "refs/heads/x")) + "0000"},
      {"upper-case id", pktLine(cmd(std::string(40, 'A'), kB, "refs/heads/x")) + "0000"},
      {"ids of two lengths", pktLine(cmd(kA, std::string(64, 'b'), "refs/heads/x")) + "0000"},
      {"space in ref", pktLine(cmd(kA, kB, "refs/heads/a b")) + "0000"},
      {"control character in ref", pktLine(cmd(kA, kB, "refs/heads/a\rb")) + "0000"},
      {"empty ref", pktLine(kA + " " + kB + " ") + "0000"},
      {"capabilities on a later command",
       pktLine(cmd(kA, kB, "refs/heads/x")) +
           pktLine(cmd(kA, kB, "refs/heads/y") + std::string(1, '\0') + "report-status") + "0000"},
      {"signed push", pktLine("push-cert" + std::string(1, '\0') + "report-status\n") + "0000"},
      {"shallow without an id", pktLine("shallow xyz") + "0000"},
  };
  for (const auto& c : cases) {
    auto p = parsePushCommands(c.body, 65536);
    EXPECT_EQ(p.status, PushCommands::Status::kProtocolError) << c.name;
    EXPECT_FALSE(p.error.empty()) << c.name;
    EXPECT_TRUE(p.commands.empty()) << c.name << ": nothing half-parsed is returned";
  }
}

TEST(GitPushParser, ACommandListLongerThanTheLimitIsAnError) {
  std::string body;
  for (int i = 0; i < 100; ++i) body += pktLine(cmd(kA, kB, "refs/heads/b" + std::to_string(i)));
  // Complete or not, a list that does not end within the limit is refused, never forwarded.
  auto cut = parsePushCommands(std::string_view(body).substr(0, 1000), 1000);
  EXPECT_EQ(cut.status, PushCommands::Status::kProtocolError);
  EXPECT_NE(cut.error.find("longer than 1000 bytes"), std::string::npos) << cut.error;
  auto whole = parsePushCommands(body + "0000", 1000);
  EXPECT_EQ(whole.status, PushCommands::Status::kProtocolError);
  EXPECT_EQ(parsePushCommands(body + "0000", 65536).commands.size(), 100u);
}

// Splits a side-band stream into {band, data} packets, checking each length; stops at flush.
std::vector<std::pair<char, std::string>> bands(std::string_view s, bool* flushed) {
  std::vector<std::pair<char, std::string>> out;
  *flushed = false;
  while (s.size() >= 4) {
    size_t len = std::stoul(std::string(s.substr(0, 4)), nullptr, 16);
    if (len == 0) {
      *flushed = s.size() == 4;
      break;
    }
    out.emplace_back(s[4], std::string(s.substr(5, len - 5)));
    s.remove_prefix(len);
  }
  return out;
}

TEST(GitPushRefusal, ReportStatusInSideBand64k) {
  auto p = parsePushCommands(typicalPush(), 65536);
  const std::string body = receivePackRefusal(p, {"git_ref_not_allowed (x)"}, "push refused");
  bool flushed = false;
  auto packets = bands(body, &flushed);
  EXPECT_TRUE(flushed);
  ASSERT_EQ(packets.size(), 2u);
  EXPECT_EQ(packets[0].first, '\2');
  EXPECT_EQ(packets[0].second, "sandgate: push refused\n");
  EXPECT_EQ(packets[1].first, '\1');
  EXPECT_EQ(packets[1].second, pktLine("unpack ok\n") +
                                   pktLine("ng refs/heads/agent/x sandgate: git_ref_not_allowed "
                                           "(x)\n") +
                                   "0000");
}

TEST(GitPushRefusal, PlainReportWithoutSideBandAndCleanReasons) {
  auto p = parsePushCommands(
      pktLine(cmd(kA, kB, "refs/heads/a") + std::string(1, '\0') + "report-status") +
          pktLine(cmd(kA, kB, "refs/heads/b")) + "0000",
      65536);
  ASSERT_EQ(p.commands.size(), 2u);
  const std::string body = receivePackRefusal(p, {"first\nline", "second"}, "ignored");
  EXPECT_EQ(body, pktLine("unpack ok\n") + pktLine("ng refs/heads/a sandgate: first line\n") +
                      pktLine("ng refs/heads/b sandgate: second\n") + "0000");
}

TEST(GitPushRefusal, LongReportsAreSplitIntoBandPackets) {
  std::string list;
  for (int i = 0; i < 3000; ++i) {
    list += pktLine(cmd(kA, kB, "refs/heads/branch-" + std::to_string(i)) +
                    (i == 0 ? std::string(1, '\0') + "report-status side-band-64k" : ""));
  }
  auto p = parsePushCommands(list + "0000", 1 << 20);
  ASSERT_EQ(p.commands.size(), 3000u);
  std::vector<std::string> why(3000, "git_ref_not_allowed");
  bool flushed = false;
  auto packets = bands(receivePackRefusal(p, why, ""), &flushed);
  EXPECT_TRUE(flushed);
  ASSERT_GT(packets.size(), 1u);
  std::string report;
  for (const auto& [band, data] : packets) {
    EXPECT_EQ(band, '\1');
    EXPECT_LE(data.size() + 5, 65520u);
    report += data;
  }
  EXPECT_TRUE(report.starts_with(pktLine("unpack ok\n")));
  EXPECT_TRUE(report.ends_with(
      pktLine("ng refs/heads/branch-2999 sandgate: git_ref_not_allowed\n") + "0000"));
}

TEST(GitPushRefusal, WithoutReportStatusOnlyTheMessage) {
  auto p = parsePushCommands(
      pktLine(cmd(kA, kB, "refs/heads/a") + std::string(1, '\0') + "side-band") + "0000", 65536);
  EXPECT_EQ(receivePackRefusal(p, {"x"}, "no"), "0012\2sandgate: no\n0000");
}

}  // namespace
}  // namespace sandgate::policy
