// Tests of loadFile/loadString: the shipped examples, one broken file per mistake with its
// exact position and message, several problems at once, and input that must not crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::loadErrors;
using testing::loadOk;

const std::string kSourceDir = SANDGATE_SOURCE_DIR;
const std::string kBrokenDir = kSourceDir + "/tests/testdata/config/";

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Examples, QuickstartLoads) {
  auto r = loadFile(kSourceDir + "/config/examples/quickstart.yaml");
  ASSERT_TRUE(r.ok()) << r.errorText();
  ASSERT_EQ(r->tasks.size(), 1u);
  EXPECT_EQ(r->tasks[0].name, "demo");
  EXPECT_EQ(r->tasks[0].policy.value, "npm");
  ASSERT_TRUE(r->policies.contains("npm"));
  ASSERT_EQ(r->policies.at("npm").allow.size(), 1u);
  EXPECT_EQ(r->policies.at("npm").allow[0].host->value, "registry.npmjs.org");
  EXPECT_TRUE(r->policies.at("npm").allow[0].ports.empty());  // the default, 443
}

TEST(Examples, CodingAgentLoads) {
  auto r = loadFile(kSourceDir + "/config/examples/coding-agent.yaml");
  ASSERT_TRUE(r.ok()) << r.errorText();
  const Config& c = *r;
  const Task* agent = c.findTask("agent");
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(agent->policy.value, "agent");
  EXPECT_TRUE(agent->tokenSha256.has_value());
  const Policy& p = c.policies.at("agent");
  ASSERT_EQ(p.include.size(), 3u);
  EXPECT_EQ(p.include[0].value, "npm");
  ASSERT_EQ(p.allow.size(), 1u);
  ASSERT_TRUE(p.allow[0].credential.has_value());
  EXPECT_EQ(p.allow[0].credential->value, "openai");
  const Credential& openai = c.credentials.at("openai");
  EXPECT_EQ(openai.source.kind, CredentialSource::Kind::kFile);
  EXPECT_EQ(openai.source.file, "/run/secrets/openai");
  EXPECT_EQ(openai.inject.value, "Bearer {secret}");
  const Policy& gh = c.policies.at("github-read");
  ASSERT_EQ(gh.deny.size(), 1u);
  EXPECT_EQ(gh.deny[0].host->value, "gist.githubusercontent.com");
  EXPECT_EQ(c.global.deny.size(), 3u);
  ASSERT_TRUE(c.limits.maxHeaderBytes.has_value());
  EXPECT_EQ(*c.limits.maxHeaderBytes, 64u * 1024);
  EXPECT_EQ(c.file, kSourceDir + "/config/examples/coding-agent.yaml");
}

struct BrokenCase {
  const char* file;
  int line;
  int col;
  const char* keyPath;
  const char* message;  // the exact message
};

// One mistake per file; the position is where a person would put the cursor to fix it.
const BrokenCase kBroken[] = {
    {"typo_key_alow.yaml", 4, 5, "policies.npm.alow", "unknown key `alow`; did you mean `allow`?"},
    {"unknown_top_level_key.yaml", 2, 1, "logging",
     "unknown key `logging`; expected one of: listen, credentials, policies, tasks, global, "
     "limits, resolve, audit, metrics, ca, ca_cert_out, tls, transparent, sandbox, tokens, "
     "upstream_proxies, upstream_proxy_default, upstream_proxy_direct, llm, state, ssh"},
    {"typo_top_level_key.yaml", 2, 1, "polcies", "unknown key `polcies`; did you mean `policies`?"},
    {"syntax_unclosed_flow.yaml", 7, 6, "",
     "invalid YAML: end of sequence flow not found (a `[` above is not closed with `]`)"},
    {"tab_indentation.yaml", 4, 1, "",
     "tab character in indentation; YAML indents with spaces only"},
    {"bad_indentation.yaml", 6, 4, "",
     "invalid YAML: end of map not found (is this line indented like the keys above it?)"},
    {"wrong_type_map_for_list.yaml", 5, 7, "policies.npm.allow",
     "expected a list of rules, got a map"},
    {"wrong_type_string_for_int.yaml", 3, 20, "limits.max_connections",
     "expected an integer from 1 to 4294967295, got `many`"},
    {"string_for_map.yaml", 2, 9, "limits", "expected a map of limits, got `fast`"},
    {"bad_bool.yaml", 6, 18, "policies.npm.allow[0].inspect", "expected true or false, got `yes`"},
    {"duplicate_key.yaml", 6, 5, "policies.npm.allow",
     "duplicate key `allow` (first given at line 4)"},
    {"duplicate_task.yaml", 7, 11, "tasks[1].name",
     "duplicate task name `agent` (first defined at line 5)"},
    {"include_cycle.yaml", 6, 15, "policies.b.include[0]", "include cycle: a -> b -> a"},
    {"unknown_include.yaml", 7, 15, "policies.agent.include[0]",
     "unknown policy `npn`; did you mean `npm`?"},
    {"include_not_a_list.yaml", 5, 14, "policies.agent.include",
     "expected a list of policy names, e.g. [npm, pypi], got `npm`"},
    {"unknown_credential.yaml", 6, 21, "policies.llm.allow[0].credential",
     "unknown credential `openai`; none are defined"},
    {"unknown_policy_in_task.yaml", 6, 13, "tasks[0].policy",
     "unknown policy `agents`; defined: npm"},
    {"bad_port.yaml", 6, 22, "policies.web.allow[0].ports[1]",
     "expected an integer from 1 to 65535, got `70000`"},
    {"port_not_a_list.yaml", 6, 16, "policies.web.allow[0].ports",
     "expected a list of ports, e.g. [443] or [80, 443], got `8443`"},
    {"empty_ports_list.yaml", 6, 16, "policies.web.allow[0].ports",
     "empty list; expected a list of ports, e.g. [443] (omit the key for the default)"},
    {"bad_duration.yaml", 3, 17, "limits.idle_timeout",
     "expected a duration such as 250ms, 10s, 5m, 1h or 1m30s, got `10 sec`"},
    {"bad_size.yaml", 3, 21, "limits.max_header_bytes",
     "expected a size such as 65536, 64KiB or 1MiB, got `lots`"},
    {"missing_host_and_cidrs.yaml", 6, 9, "policies.web.allow[1]",
     "a rule needs `host` or `cidrs`"},
    {"empty_required_value.yaml", 5, 9, "policies.web.allow[0].host",
     "empty value; expected a host name or pattern"},
    {"bad_mode.yaml", 6, 15, "policies.web.deny[0].mode", "expected enforce or audit, got `warn`"},
    {"bad_token_hash.yaml", 7, 19, "tasks[0].token_sha256",
     "expected the token's SHA-256 as 64 hex characters, got 6 characters (value not shown)"},
    {"bad_task_name.yaml", 5, 11, "tasks[0].name",
     "invalid name `my:task`; expected letters, digits, '.', '_' and '-' only"},
    {"credential_without_hosts.yaml", 3, 3, "credentials.openai",
     "missing required key `hosts` (the hosts this secret may be sent to)"},
    {"credential_two_sources.yaml", 6, 7, "credentials.openai.source.env",
     "`env` conflicts with `file`: expected exactly one of `file`, `env`, `exec` or `github_app`"},
    {"credential_no_source.yaml", 4, 5, "credentials.openai.source",
     "expected exactly one of `file`, `env`, `exec` or `github_app`, got none"},
    {"ttl_on_file_source.yaml", 4, 42, "credentials.openai.source.ttl",
     "`ttl` applies only to `exec` sources"},
    {"inject_without_secret.yaml", 6, 45, "credentials.openai.inject.value",
     "expected a template containing `{secret}`, got `Bearer {SECRET}`"},
    {"credential_in_deny_rule.yaml", 11, 9, "policies.p.deny[0].credential",
     "a deny rule cannot name a credential; move it to an allow rule"},
    {"bad_resolve_address.yaml", 3, 23, "resolve[\"registry.npmjs.org\"]",
     "expected an IP address, optionally with a port: 127.0.0.1, 127.0.0.1:8443, ::1 or "
     "[::1]:8443, got `10.0.0.300`"},
    {"resolve_duplicate_host.yaml", 4, 3, "resolve[\"Example.COM.\"]",
     "`Example.COM.` is the same host as the entry at line 3"},
    {"bad_listen_address.yaml", 3, 10, "listen.proxy",
     "expected host:port such as 127.0.0.1:3128, got `3128`"},
    {"empty.yaml", 1, 1, "",
     "the config is empty; expected a map with keys such as policies and tasks"},
    {"comments_only.yaml", 1, 1, "",
     "the config is empty; expected a map with keys such as policies and tasks"},
    {"non_map_top_level.yaml", 2, 1, "",
     "expected a map of top-level keys (listen, policies, tasks, ...), got a list"},
    {"multiple_documents.yaml", 3, 1, "",
     "a second YAML document; the config must be a single document"},
};

TEST(BrokenFiles, EachGivesItsOwnErrorAtItsPosition) {
  for (const auto& c : kBroken) {
    SCOPED_TRACE(c.file);
    std::string path = kBrokenDir + c.file;
    ASSERT_TRUE(std::filesystem::exists(path));
    auto r = loadFile(path);
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.errors().size(), 1u) << r.errorText();
    const Diagnostic& d = r.errors()[0];
    EXPECT_EQ(d.file, path);
    EXPECT_EQ(d.line, c.line) << d.str();
    EXPECT_EQ(d.col, c.col) << d.str();
    EXPECT_EQ(d.keyPath, c.keyPath) << d.str();
    EXPECT_EQ(d.message, c.message) << d.str();
  }
}

TEST(BrokenFiles, EveryFileInTestdataHasATableEntry) {
  std::set<std::string> inTable;
  for (const auto& c : kBroken) inTable.insert(c.file);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kBrokenDir)) {
    if (e.path().extension() != ".yaml") continue;
    ++files;
    EXPECT_TRUE(inTable.contains(e.path().filename().string())) << e.path();
  }
  EXPECT_EQ(files, inTable.size());
  EXPECT_GE(files, 20u);
}

TEST(LoadString, UsesTheGivenNameInDiagnostics) {
  auto r = loadString("polices: {}\n", "inline.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errorText(),
            "inline.yaml:1:1: polices: unknown key `polices`; did you mean `policies`?");
}

TEST(LoadString, ValidTextSetsFile) {
  auto r = loadString("policies: {p: {}}\ntasks: [{name: t, policy: p}]\n", "<embedded>");
  ASSERT_TRUE(r.ok()) << r.errorText();
  EXPECT_EQ(r->file, "<embedded>");
  ASSERT_NE(r->findTask("t"), nullptr);
}

TEST(LoadString, EmptyForms) {
  struct Case {
    const char* name;
    const char* text;
  };
  const Case cases[] = {{"nothing", ""},
                        {"blank lines", "\n\n  \n"},
                        {"null", "~\n"},
                        {"document marker only", "---\n"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto errors = loadErrors(c.text);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].message.find("the config is empty"), std::string::npos);
  }
}

// yaml-cpp 0.7's LoadAll never returns on these (found by fuzz/config_loader_fuzz; the inputs
// are in fuzz/corpus/config_loader_fuzz/regress-*): the loader must answer, with where.
TEST(LoadString, StrayFlowTokenIsAnErrorNotAHang) {
  struct Case {
    const char* name;
    const char* text;
    int line, col;
  };
  const Case cases[] = {{"a lone comma", ",", 1, 1},
                        {"a comma after a comment", "# listen:\n,\n", 2, 1},
                        {"a comma before a document", ",\nlisten:\n  proxy: 127.0.0.1:3128\n", 1, 1}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto errors = loadErrors(c.text);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].line, c.line);
    EXPECT_EQ(errors[0].col, c.col);
    EXPECT_NE(errors[0].message.find("invalid YAML"), std::string::npos) << errors[0].message;
  }
}

TEST(LoadString, EmptyTopLevelMapIsValid) {
  auto c = loadOk("{}\n");
  EXPECT_TRUE(c.policies.empty());
  EXPECT_TRUE(c.tasks.empty());
}

TEST(LoadString, TabsInsideValuesAreNotIndentation) {
  auto c = loadOk("policies:\n  p:\n    allow:\n      - host:\texample.com\n");
  EXPECT_EQ(c.policies.at("p").allow[0].host->value, "example.com");
}

TEST(LoadString, ReportsEveryProblemNotJustTheFirst) {
  const std::string yaml =
      "policies:\n"                  // 1
      "  web:\n"                     // 2
      "    alow: []\n"               // 3 unknown key
      "    allow:\n"                 // 4
      "      - host: example.com\n"  // 5
      "        ports: [0]\n"         // 6 bad port
      "      - methods: [GET]\n"     // 7 no host or cidrs
      "tasks:\n"                     // 8
      "  - name: t\n"                // 9
      "    policy: nope\n"           // 10 unknown policy
      "    token_sha256: 12\n"       // 11 bad hash
      "limits:\n"                    // 12
      "  idle_timeout: soon\n";      // 13 bad duration
  auto errors = loadErrors(yaml);
  struct Want {
    int line;
    int col;
    const char* path;
  };
  // Document order, except that reference checks (the unknown policy) run after reading.
  const Want want[] = {{3, 5, "policies.web.alow"},     {6, 17, "policies.web.allow[0].ports[0]"},
                       {7, 9, "policies.web.allow[1]"}, {11, 19, "tasks[0].token_sha256"},
                       {13, 17, "limits.idle_timeout"}, {10, 13, "tasks[0].policy"}};
  ASSERT_EQ(errors.size(), std::size(want));
  for (size_t i = 0; i < std::size(want); ++i) {
    SCOPED_TRACE(want[i].path);
    EXPECT_EQ(errors[i].line, want[i].line) << errors[i].str();
    EXPECT_EQ(errors[i].col, want[i].col) << errors[i].str();
    EXPECT_EQ(errors[i].keyPath, want[i].path) << errors[i].str();
    EXPECT_EQ(errors[i].file, "test.yaml");
  }
}

TEST(LoadString, BrokenDefinitionsDoNotCascadeIntoReferences) {
  // The policy and the credential are broken, but they exist: references to them must not
  // add "unknown policy" or "unknown credential" on top of the real errors.
  const std::string yaml =
      "credentials:\n"
      "  key: [not, a, map]\n"
      "policies:\n"
      "  p: 42\n"
      "  q:\n"
      "    allow:\n"
      "      - host: a.example\n"
      "        credential: key\n"
      "tasks:\n"
      "  - name: t\n"
      "    policy: p\n"
      "  - name: u\n"
      "    policy: [p]\n";
  auto errors = loadErrors(yaml);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].keyPath, "credentials.key");
  EXPECT_EQ(errors[1].keyPath, "policies.p");
  EXPECT_EQ(errors[2].keyPath, "tasks[1].policy");
}

TEST(LoadFile, MissingFileNamesPathAndReason) {
  std::string path = kBrokenDir + "does-not-exist.yaml";
  auto r = loadFile(path);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors().size(), 1u);
  EXPECT_EQ(r.errors()[0].str(), path + ": cannot read config: No such file or directory");
}

TEST(LoadFile, DirectoryIsRefused) {
  auto r = loadFile(kBrokenDir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors()[0].str(), kBrokenDir + ": cannot read config: Is a directory");
}

// Every prefix of a valid config is plausible damaged input (a half-saved file); none may
// crash, and each either loads or explains itself with a positioned diagnostic.
TEST(Robustness, EveryPrefixOfTheExamplesIsHandled) {
  for (const char* name : {"quickstart.yaml", "coding-agent.yaml"}) {
    SCOPED_TRACE(name);
    std::string text = readText(kSourceDir + "/config/examples/" + name);
    ASSERT_FALSE(text.empty());
    for (size_t n = 0; n <= text.size(); ++n) {
      auto r = loadString(text.substr(0, n), name);
      if (r.ok()) continue;
      ASSERT_FALSE(r.errors().empty());
      for (const auto& d : r.errors()) {
        ASSERT_EQ(d.file, name);
        ASSERT_FALSE(d.message.empty());
      }
    }
  }
}

TEST(Robustness, OddInputsGiveErrorsNotCrashes) {
  struct Case {
    const char* name;
    std::string text;
  };
  const Case cases[] = {
      {"binary", std::string("\0\x01\xff\xfe:", 5)},
      {"deep nesting", std::string(5000, '[')},
      {"complex key", "? [a, b]\n: 1\n"},
      {"alias to missing anchor", "policies: *nope\n"},
      {"scalar top level", "just a string\n"},
      {"rule list of scalars", "policies:\n  p:\n    allow: [a, b]\n"},
      {"huge integer", "limits:\n  max_connections: 99999999999999999999999\n"},
      {"huge duration", "limits:\n  idle_timeout: 1e400s\n"},
      {"nan rate", "limits:\n  new_connections_per_second: .nan\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = loadString(c.text, "odd.yaml");
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(r.errors().empty());
  }
}

}  // namespace
}  // namespace sandgate::config
