// Tests of `sandbox:` (section_readers.cc's readSandbox), the limit values it shares with
// `sandgate run`'s flags (config.cc) and the defaults the built-in config writes out.
#include <gtest/gtest.h>

#include "config/config.h"
#include "config/default_config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

void expectDefaults(const Sandbox& s) {
  EXPECT_EQ(s.memoryBytes, 4 * kGiB);
  EXPECT_EQ(s.pids, 1024u);
  EXPECT_FALSE(s.cpus.has_value());
  EXPECT_EQ(s.timeout, Seconds(7200));
  EXPECT_EQ(s.tmpfsBytes, kGiB);
  EXPECT_TRUE(s.readOnlyPaths.empty());
  EXPECT_EQ(s.idRangeFirst, 0x7E000000u);
  EXPECT_EQ(s.idRangeCount, 65536u);
  EXPECT_EQ(s.workspaceMode, "overlay");
  EXPECT_FALSE(s.diskBytes.has_value());
}

TEST(SandboxSection, DefaultsWhenTheSectionOrAKeyIsAbsent) {
  SCOPED_TRACE("no section");
  expectDefaults(loadOk("policies: {}\n").sandbox);
  SCOPED_TRACE("empty section");
  expectDefaults(loadOk("sandbox:\n").sandbox);
  SCOPED_TRACE("empty map");
  expectDefaults(loadOk("sandbox: {}\n").sandbox);
  auto one = loadOk("sandbox: {pids: 64}\n").sandbox;
  EXPECT_EQ(one.pids, 64u);
  EXPECT_EQ(one.memoryBytes, 4 * kGiB);  // the others keep their defaults
  EXPECT_EQ(one.timeout, Seconds(7200));
}

TEST(SandboxSection, TheBuiltInConfigWritesTheSameDefaultsOut) {
  auto c = defaultConfig();
  ASSERT_TRUE(c.ok()) << c.errorText();
  expectDefaults(c->sandbox);
  // Written out, not left implicit: users read the built-in config to see the defaults.
  for (const char* key :
       {"memory: 4G", "pids: 1024", "cpus: unlimited", "timeout: 2h", "tmpfs_size: 1G",
        "id_range: 2113929216-2113994751", "workspace_mode: overlay", "disk: unlimited"}) {
    EXPECT_NE(defaultConfigText().find(key), std::string::npos) << key;
  }
}

TEST(SandboxSection, EveryKey) {
  auto s = loadOk(
               "sandbox:\n"
               "  memory: 64M\n"
               "  pids: 100\n"
               "  cpus: 1.5\n"
               "  timeout: 1h30m\n"
               "  tmpfs_size: 256MiB\n"
               "  ro: [/opt/toolchain, /srv/data/]\n"
               "  id_range: 100000-165535\n")
               .sandbox;
  EXPECT_EQ(s.memoryBytes, 64 * kMiB);
  EXPECT_EQ(s.pids, 100u);
  EXPECT_EQ(s.cpus, 1.5);
  EXPECT_EQ(s.timeout, Seconds(5400));
  EXPECT_EQ(s.tmpfsBytes, 256 * kMiB);
  EXPECT_EQ(s.readOnlyPaths, (std::vector<std::string>{"/opt/toolchain", "/srv/data"}));
  EXPECT_EQ(s.idRangeFirst, 100000u);
  EXPECT_EQ(s.idRangeCount, 65536u);
}

TEST(SandboxSection, UnlimitedUnsetsEachLimit) {
  auto s = loadOk(
               "sandbox:\n"
               "  memory: unlimited\n"
               "  pids: unlimited\n"
               "  cpus: unlimited\n"
               "  timeout: unlimited\n")
               .sandbox;
  EXPECT_FALSE(s.memoryBytes.has_value());
  EXPECT_FALSE(s.pids.has_value());
  EXPECT_FALSE(s.cpus.has_value());
  EXPECT_FALSE(s.timeout.has_value());
  EXPECT_EQ(s.tmpfsBytes, kGiB);  // not a limit that can be unset
}

TEST(SandboxSection, WorkspaceMode) {
  EXPECT_EQ(loadOk("sandbox: {workspace_mode: bind}\n").sandbox.workspaceMode, "bind");
  EXPECT_EQ(loadOk("sandbox: {workspace_mode: overlay}\n").sandbox.workspaceMode, "overlay");
}

TEST(SandboxSection, Disk) {
  EXPECT_EQ(loadOk("sandbox: {disk: 512M}\n").sandbox.diskBytes, 512 * kMiB);
  EXPECT_FALSE(loadOk("sandbox: {disk: unlimited}\n").sandbox.diskBytes.has_value());
  for (const char* bad : {"0", "lots", "-1G"}) {
    SCOPED_TRACE(bad);
    auto errors = loadErrors(std::string("sandbox: {disk: ") + bad + "}\n");
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].message.find("expected a size such as 2G or 512M or unlimited"),
              std::string::npos)
        << errors[0].message;
    EXPECT_EQ(errors[0].keyPath, "sandbox.disk");
  }
}

TEST(SandboxSection, IdRangeForms) {
  struct Case {
    const char* name;
    const char* value;
    uint32_t first;
    uint32_t count;
  };
  const Case cases[] = {
      {"first-last", "2113929216-2113994751", 0x7E000000u, 65536},
      {"quoted", "\"5000-5000\"", 5000, 1},
      {"map", "{first: 200000, count: 1000}", 200000, 1000},
      {"block map", "\n    first: 1\n    count: 10", 1, 10},
      {"up to the highest uid", "4294967294-4294967294", 4294967294u, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto s = loadOk(std::string("sandbox:\n  id_range: ") + c.value + "\n").sandbox;
    EXPECT_EQ(s.idRangeFirst, c.first);
    EXPECT_EQ(s.idRangeCount, c.count);
  }
}

TEST(SandboxSection, Errors) {
  struct Case {
    const char* name;
    const char* body;  // after "sandbox:\n"
    Expected want;
  };
  const Case cases[] = {
      {"unknown key", "  memroy: 1G\n", {2, 3, "sandbox.memroy", "did you mean `memory`?"}},
      {"unknown key far from any", "  swap: 1G\n", {2, 3, "sandbox.swap", "expected one of:"}},
      {"memory not a size",
       "  memory: lots\n",
       {2, 11, "sandbox.memory", "expected a size such as 4G or 512M or unlimited, got `lots`"}},
      {"memory zero", "  memory: 0\n", {2, 11, "sandbox.memory", "got `0`"}},
      {"memory a list", "  memory: [1G]\n", {2, 11, "sandbox.memory", "got a list"}},
      {"memory empty", "  memory:\n", {2, 3, "sandbox.memory", "empty value"}},
      {"unlimited is lower case",
       "  memory: Unlimited\n",
       {2, 11, "sandbox.memory", "got `Unlimited`"}},
      {"pids zero", "  pids: 0\n", {2, 9, "sandbox.pids", "an integer from 1 to 4294967295"}},
      {"pids negative", "  pids: -1\n", {2, 9, "sandbox.pids", "got `-1`"}},
      {"pids too large", "  pids: 4294967296\n", {2, 9, "sandbox.pids", "got `4294967296`"}},
      {"pids hex", "  pids: 0x10\n", {2, 9, "sandbox.pids", "got `0x10`"}},
      {"cpus zero", "  cpus: 0\n", {2, 9, "sandbox.cpus", "a number of cores"}},
      {"cpus inf", "  cpus: inf\n", {2, 9, "sandbox.cpus", "got `inf`"}},
      {"cpus exponent", "  cpus: 1e3\n", {2, 9, "sandbox.cpus", "got `1e3`"}},
      {"cpus too many", "  cpus: 100000\n", {2, 9, "sandbox.cpus", "got `100000`"}},
      {"timeout zero", "  timeout: 0s\n", {2, 12, "sandbox.timeout", "a duration such as"}},
      {"timeout no unit", "  timeout: 2 hours\n", {2, 12, "sandbox.timeout", "got `2 hours`"}},
      {"tmpfs unlimited",
       "  tmpfs_size: unlimited\n",
       {2, 15, "sandbox.tmpfs_size", "tmpfs_size cannot be unlimited"}},
      {"tmpfs zero", "  tmpfs_size: 0\n", {2, 15, "sandbox.tmpfs_size", "got `0`"}},
      {"ro not a list",
       "  ro: /opt\n",
       {2, 7, "sandbox.ro", "expected a list of absolute host paths"}},
      {"ro relative", "  ro: [opt/tool]\n", {2, 8, "sandbox.ro[0]", "expected an absolute path"}},
      {"ro dot dot",
       "  ro: [/opt/../etc]\n",
       {2, 8, "sandbox.ro[0]", "without . or .. components"}},
      {"ro root", "  ro: [\"//\"]\n", {2, 8, "sandbox.ro[0]", "/ cannot be read-only"}},
      {"ro duplicate",
       "  ro:\n    - /opt/a\n    - /opt/a/\n",
       {4, 7, "sandbox.ro[1]", "`/opt/a` is already listed at line 3"}},
      {"id range includes 0",
       "  id_range: 0-65535\n",
       {2, 13, "sandbox.id_range", "must not include 0"}},
      {"id range past the top",
       "  id_range: 4294967000-4294967295\n",
       {2, 13, "sandbox.id_range", "goes past 4294967294"}},
      {"id range map past the top",
       "  id_range: {first: 4294967290, count: 10}\n",
       {2, 13, "sandbox.id_range", "goes past 4294967294"}},
      {"id range backwards",
       "  id_range: 2000-1000\n",
       {2, 13, "sandbox.id_range", "expected a uid range FIRST-LAST"}},
      {"id range one number",
       "  id_range: 2113929216\n",
       {2, 13, "sandbox.id_range", "got `2113929216`"}},
      {"id range count zero",
       "  id_range: {first: 1000, count: 0}\n",
       {2, 34, "sandbox.id_range.count", "an integer from 1 to"}},
      {"id range first zero",
       "  id_range: {first: 0, count: 10}\n",
       {2, 21, "sandbox.id_range.first", "an integer from 1 to"}},
      {"id range map without count",
       "  id_range: {first: 1000}\n",
       {2, 3, "sandbox.id_range", "missing required key `count`"}},
      {"id range map unknown key",
       "  id_range: {first: 1000, count: 5, last: 2000}\n",
       {2, 37, "sandbox.id_range.last", "unknown key `last`"}},
      {"workspace mode unknown",
       "  workspace_mode: copy\n",
       {2, 19, "sandbox.workspace_mode", "expected overlay or bind, got `copy`"}},
      {"workspace mode a list",
       "  workspace_mode: [bind]\n",
       {2, 19, "sandbox.workspace_mode", "got a list"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto errors = loadErrors(std::string("sandbox:\n") + c.body);
    expectOne(errors, c.want);
    if (!errors.empty()) {
      EXPECT_EQ(errors[0].file, "test.yaml");
    }
  }
}

TEST(SandboxSection, NotAMap) {
  expectOne(loadErrors("sandbox: 4G\n"), {1, 10, "sandbox", "expected a map with memory, pids"});
}

TEST(SandboxSection, EveryProblemIsReported) {
  auto errors = loadErrors(
      "sandbox:\n"
      "  memory: lots\n"
      "  pids: 0\n"
      "  ro: [relative]\n");
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_EQ(errors[1].line, 3);
  EXPECT_EQ(errors[2].line, 4);
}

TEST(LimitValues, PidsCpusAndReadOnlyPaths) {
  EXPECT_EQ(parsePidsLimit("1"), 1u);
  EXPECT_EQ(parsePidsLimit("4294967295"), 4294967295u);
  EXPECT_FALSE(parsePidsLimit("").has_value());
  EXPECT_FALSE(parsePidsLimit("+5").has_value());
  EXPECT_FALSE(parsePidsLimit("unlimited").has_value());  // the caller's word, not a value
  EXPECT_EQ(parseCpusLimit("0.5"), 0.5);
  EXPECT_EQ(parseCpusLimit("65536"), 65536.0);
  EXPECT_FALSE(parseCpusLimit("nan").has_value());
  EXPECT_FALSE(parseCpusLimit("-1").has_value());
  EXPECT_FALSE(parseCpusLimit("0.0").has_value());

  struct Case {
    const char* in;
    std::optional<std::string> want;
  };
  const Case cases[] = {
      {"/opt/toolchain", "/opt/toolchain"},
      {"/opt//toolchain/", "/opt/toolchain"},
      {"/a/.b/c..", "/a/.b/c.."},
      {"opt", std::nullopt},
      {"", std::nullopt},
      {"/", std::nullopt},
      {"/opt/./x", std::nullopt},
      {"/opt/..", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.in);
    std::string why;
    auto got = normaliseReadOnlyPath(c.in, &why);
    EXPECT_EQ(got, c.want);
    EXPECT_EQ(why.empty(), c.want.has_value()) << why;
  }
}

}  // namespace
}  // namespace sandgate::config
