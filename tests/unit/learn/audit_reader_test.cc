// learn/audit_reader: which lines become requests, which are skipped, which are bad (by line).
#include "learn/audit_reader.h"

#include <gtest/gtest.h>

#include <sstream>

namespace sandgate::learn {
namespace {

std::string line(const std::string& kind, const std::string& verdict, const std::string& reason,
                 const std::string& method, const std::string& path, int port = 443,
                 const std::string& task = "\"demo\"") {
  return "{\"time\":\"2026-01-01T00:00:00.000Z\",\"kind\":\"" + kind +
         "\",\"request_id\":\"ab-1\",\"connection_id\":\"ab\",\"run\":null,\"task\":" + task +
         ",\"client\":\"127.0.0.1:5\",\"listener\":\"127.0.0.1:3128\",\"mode\":\"proxy\","
         "\"method\":" +
         method + ",\"scheme\":\"https\",\"host\":\"api.test\",\"port\":" + std::to_string(port) +
         ",\"path\":" + path + ",\"verdict\":\"" + verdict + "\",\"reason\":\"" + reason +
         "\",\"rule\":null,\"credential\":\"openai\",\"injected\":true,\"status\":200,"
         "\"bytes_up\":1,\"bytes_down\":2,\"duration_ms\":1.5,\"upstream\":\"127.0.0.1:9\","
         "\"error\":null,\"git\":null}";
}

TEST(AuditReader, AnInterceptedRequestKeepsMethodPathCredentialAndUpstream) {
  std::string why;
  auto o = parseAuditLine(line("intercept", "allow", "allowed", "\"POST\"", "\"/v1/x\""), &why);
  ASSERT_TRUE(o) << why;
  EXPECT_EQ(o->task, "demo");
  EXPECT_EQ(o->host, "api.test");
  EXPECT_EQ(o->port, 443);
  EXPECT_EQ(o->method, "POST");
  EXPECT_EQ(o->path, "/v1/x");
  EXPECT_EQ(o->credential, "openai");
  EXPECT_EQ(o->upstream, "127.0.0.1:9");
  EXPECT_TRUE(o->allowed);
}

TEST(AuditReader, ALearnModeAdmissionIsReadAsAllowed) {
  // A learning run's line: admitted, with the reason the policy would have refused it.
  std::string why;
  auto o = parseAuditLine(
      line("intercept", "learn", "no_matching_rule", "\"GET\"", "\"/v1/items\""), &why);
  ASSERT_TRUE(o) << why;
  EXPECT_TRUE(o->allowed);
  EXPECT_EQ(o->reason, "no_matching_rule");
}

TEST(AuditReader, ATunnelHasNoMethodOrPath) {
  std::string why;
  auto o = parseAuditLine(line("tunnel", "allow", "allowed", "\"CONNECT\"", "null"), &why);
  ASSERT_TRUE(o) << why;
  EXPECT_FALSE(o->path);
  EXPECT_FALSE(o->method);
}

TEST(AuditReader, RefusalsTheRulesCouldNotChangeAreSkippedNotBad) {
  struct Case {
    const char* name;
    std::string text;
  } cases[] = {
      {"protocol refusal", line("refusal", "deny", "bad_header", "\"GET\"", "\"/\"")},
      {"no task", line("refusal", "deny", "auth_required", "null", "null", 443, "null")},
      {"no port", line("refusal", "deny", "no_matching_rule", "null", "null", 0)},
      {"error verdict, no rule", line("forward", "error", "bad_gateway", "\"GET\"", "\"/\"")},
  };
  for (const auto& c : cases) {
    std::string why;
    EXPECT_FALSE(parseAuditLine(c.text, &why)) << c.name;
    EXPECT_EQ(why, "") << c.name;
  }
  std::string why;
  auto o = parseAuditLine(line("refusal", "deny", "path_not_allowed", "\"GET\"", "\"/a\""), &why);
  ASSERT_TRUE(o) << why;
  EXPECT_FALSE(o->allowed);
  EXPECT_EQ(o->reason, "path_not_allowed");
}

TEST(AuditReader, AnErrorAfterARuleAdmittedTheRequestCountsAsAllowed) {
  // A tunnel the client closed early: verdict error, reason client_closed, the admitting rule.
  std::string text = line("tunnel", "error", "client_closed", "\"CONNECT\"", "null");
  text.replace(text.find("\"rule\":null"), 11, "\"rule\":\"c.yaml:3\"");
  std::string why;
  auto o = parseAuditLine(text, &why);
  ASSERT_TRUE(o) << why;
  EXPECT_TRUE(o->allowed);
}

TEST(AuditReader, BadLinesAreReportedWithTheirLineNumbersAndSkipped) {
  std::stringstream in;
  in << line("intercept", "allow", "allowed", "\"GET\"", "\"/a\"") << "\n"
     << "not json at all\n"
     << "\n"  // blank lines are neither requests nor bad
     << "[1, 2]\n"
     << "{\"kind\":\"forward\",\"verdict\":\"allow\",\"port\":\"eighty\"}\n"
     << "{\"kind\":\"forward\",\"verdict\":\"maybe\"}\n"
     << "{\"kind\":\"forward\",\"verdict\":\"allow\",\"host\":7}\n"
     << line("intercept", "allow", "allowed", "\"GET\"", "\"/b\"") << "\n";
  AuditRead read;
  readAudit(in, "a.jsonl", "", read);
  ASSERT_EQ(read.requests.size(), 2u);
  EXPECT_EQ(read.requests[0].line, 1);
  EXPECT_EQ(read.requests[1].line, 8);
  EXPECT_EQ(read.requests[1].file, "a.jsonl");
  ASSERT_EQ(read.bad.size(), 5u);
  int lines[] = {2, 4, 5, 6, 7};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(read.bad[i].line, lines[i]) << read.bad[i].what;
    EXPECT_EQ(read.bad[i].file, "a.jsonl");
  }
  EXPECT_NE(read.bad[2].what.find("port"), std::string::npos);
}

TEST(AuditReader, TaskFilterKeepsOneTask) {
  std::stringstream in;
  in << line("intercept", "allow", "allowed", "\"GET\"", "\"/a\"") << "\n"
     << line("intercept", "allow", "allowed", "\"GET\"", "\"/a\"", 443, "\"other\"") << "\n";
  AuditRead read;
  readAudit(in, "a", "other", read);
  ASSERT_EQ(read.requests.size(), 1u);
  EXPECT_EQ(read.requests[0].task, "other");
}

}  // namespace
}  // namespace sandgate::learn
