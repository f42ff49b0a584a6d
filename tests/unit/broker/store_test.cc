// Tests for broker/store.cc: loading at start-up (errors and `optional`), fail-closed fetches,
// file rotation through the store, and background exec refresh with back-off.
#include "broker/store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using namespace testing;

// A command that appends a line to `counter` on every run and prints "token-<runs>".
std::vector<std::string> countingCommand(const std::string& counter) {
  return {"/bin/sh", "-c", "echo run >> \"$0\"; n=$(wc -l < \"$0\"); echo \"token-$n\"", counter};
}

TEST(SecretStore, LoadsEachSourceKind) {
  TempDir dir;
  writeFile(dir.file("f"), "file-secret\n");
  setenv("SANDGATE_STORE_TEST_ENV", "env-secret", 1);
  config::Credentials creds;
  creds["f"] = headerCredential("f", fileSource(dir.file("f")), {"a.example"});
  creds["e"] = headerCredential("e", envSource("SANDGATE_STORE_TEST_ENV"), {"a.example"});
  creds["x"] = headerCredential("x", execSource({"printf", "exec-secret"}, 600), {"a.example"});
  auto store = SecretStore::open(creds, "test.yaml");
  ASSERT_TRUE(store.ok()) << store.errorText();
  const std::pair<const char*, const char*> want[] = {
      {"f", "file-secret"}, {"e", "env-secret"}, {"x", "exec-secret"}};
  for (const auto& [name, value] : want) {
    Fetch f = (*store)->get(name);
    ASSERT_TRUE(f.ok()) << name << ": " << f.detail;
    EXPECT_EQ(f.secret->reveal(), value);
    EXPECT_TRUE(f.reason.empty());
  }
}

struct StartupCase {
  const char* name;
  config::CredentialSource source;
  const char* errorPart;
};

TEST(SecretStore, MissingSourceIsAStartupErrorUnlessOptional) {
  TempDir dir;
  unsetenv("SANDGATE_STORE_TEST_UNSET");
  const StartupCase cases[] = {
      {"file", fileSource(dir.file("missing")), "No such file"},
      {"env", envSource("SANDGATE_STORE_TEST_UNSET"), "SANDGATE_STORE_TEST_UNSET is not set"},
      {"exec", execSource({"/bin/sh", "-c", "echo nope >&2; exit 4"}, 600), "status 4: nope"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    config::Credentials creds;
    creds["api"] = headerCredential("api", c.source, {"a.example"});
    auto store = SecretStore::open(creds, "test.yaml");
    ASSERT_FALSE(store.ok());
    ASSERT_EQ(store.errors().size(), 1u);
    const Diagnostic& d = store.errors()[0];
    EXPECT_EQ(d.file, "test.yaml");
    EXPECT_EQ(d.line, 4);
    EXPECT_EQ(d.col, 13);
    EXPECT_EQ(d.keyPath, "credentials.api.source");
    EXPECT_NE(d.message.find(c.errorPart), std::string::npos) << d.message;

    creds["api"].optional = true;
    auto lenient = SecretStore::open(creds, "test.yaml");
    ASSERT_TRUE(lenient.ok()) << lenient.errorText();
    Fetch f = (*lenient)->get("api");
    EXPECT_FALSE(f.ok());
    EXPECT_EQ(f.reason, reason::kCredentialUnavailable);
    EXPECT_NE(f.detail.find(c.errorPart), std::string::npos) << f.detail;
  }
}

TEST(SecretStore, UnknownCredentialIsUnavailable) {
  auto store = SecretStore::open({}, "test.yaml");
  ASSERT_TRUE(store.ok());
  Fetch f = (*store)->get("nope");
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.reason, reason::kCredentialUnavailable);
}

TEST(SecretStore, FileRotationNeedsNoRestart) {
  TempDir dir;
  writeFile(dir.file("f"), "before-rotation\n");
  auto store = SecretStore::open(fileCredential("f", dir.file("f")), "test.yaml");
  ASSERT_TRUE(store.ok()) << store.errorText();
  EXPECT_EQ((*store)->get("f").secret->reveal(), "before-rotation");
  replaceFile(dir.file("f"), "after-rotation\n");
  EXPECT_EQ((*store)->get("f").secret->reveal(), "after-rotation");
  writeFile(dir.file("f"), "bad\nvalue");  // a broken rotation fails closed
  Fetch bad = (*store)->get("f");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.reason, reason::kCredentialUnavailable);
  EXPECT_EQ(bad.detail.find("bad"), std::string::npos) << bad.detail;
}

TEST(SecretStore, ExecIsRefreshedInTheBackgroundBeforeExpiry) {
  TempDir dir;
  config::Credentials creds;
  creds["x"] =
      headerCredential("x", execSource(countingCommand(dir.file("count")), 1.0), {"a.example"});
  StoreOptions options;
  options.refreshFraction = 0.3;  // refresh every 300 ms, 700 ms before expiry: load-tolerant
  auto store = SecretStore::open(creds, "test.yaml", options);
  ASSERT_TRUE(store.ok()) << store.errorText();
  EXPECT_EQ((*store)->get("x").secret->reveal(), "token-1");
  // Refreshed before expiry: requests see new values without ever failing.
  bool sawFailure = false;
  ASSERT_TRUE(eventually([&] {
    Fetch f = (*store)->get("x");
    if (!f.ok()) sawFailure = true;
    return f.ok() && f.secret->reveal() == "token-3";
  }));
  EXPECT_FALSE(sawFailure);
  EXPECT_GE((*store)->refreshes(), 2u);
  EXPECT_GE(readFile(dir.file("count")).size(), 3 * 4u);
}

TEST(SecretStore, ExecIsCachedForItsTtl) {
  TempDir dir;
  config::Credentials creds;
  creds["x"] =
      headerCredential("x", execSource(countingCommand(dir.file("count")), 600), {"a.example"});
  auto store = SecretStore::open(creds, "test.yaml");
  ASSERT_TRUE(store.ok()) << store.errorText();
  // Every request within the ttl is served from the cache: the command ran once.
  for (int i = 0; i < 200; ++i) {
    Fetch f = (*store)->get("x");
    ASSERT_TRUE(f.ok()) << f.detail;
    ASSERT_EQ(f.secret->reveal(), "token-1");
  }
  EXPECT_EQ(readFile(dir.file("count")), "run\n");
  EXPECT_EQ((*store)->refreshes(), 0u);
}

// The threads of this process, from /proc/self/task.
size_t threadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// `sandgate run` forks its sandbox after the store opened and refuses to fork with a second
// thread: with startRefresh off, exec refresh runs only once startRefresh() is called.
TEST(SecretStore, DeferredRefreshStartsNoThreadUntilAsked) {
  TempDir dir;
  config::Credentials creds;
  creds["x"] = headerCredential("x", execSource(countingCommand(dir.file("x")), 600), {"a."});
  creds["y"] = headerCredential("y", execSource(countingCommand(dir.file("y")), 0.02), {"a."});
  StoreOptions options;
  options.startRefresh = false;
  const size_t before = threadCount();
  auto store = SecretStore::open(creds, "test.yaml", options);
  ASSERT_TRUE(store.ok()) << store.errorText();
  EXPECT_EQ(threadCount(), before);
  EXPECT_EQ((*store)->get("x").secret->reveal(), "token-1");  // loaded by open() itself
  (*store)->startRefresh();
  (*store)->startRefresh();  // idempotent
  EXPECT_EQ(threadCount(), before + 1);
  // y's ttl of 20 ms: refreshed again and again from now on.
  ASSERT_TRUE(eventually([&] { return (*store)->refreshes() >= 2; }, std::chrono::seconds(20)));
}

TEST(SecretStore, ExecBackoffDoublesUpToItsCap) {
  TempDir dir;
  // Always fails; each run appends its start time (ns) to the file.
  std::vector<std::string> argv = {"/bin/sh", "-c", "date +%s%N >> \"$0\"; exit 1",
                                   dir.file("runs")};
  config::Credentials creds;
  creds["x"] = headerCredential("x", execSource(argv, 600), {"a.example"});
  creds["x"].optional = true;
  StoreOptions options;
  options.minBackoff = std::chrono::milliseconds(50);
  options.maxBackoff = std::chrono::milliseconds(200);
  auto store = SecretStore::open(creds, "test.yaml", options);
  ASSERT_TRUE(store.ok()) << store.errorText();
  auto runs = [&] {
    std::vector<long long> out;
    std::istringstream in(readFile(dir.file("runs")));
    for (long long t; in >> t;) out.push_back(t);
    return out;
  };
  // The start-up run, then retries after 50, 100, 200, 200, 200, 200 ms.
  ASSERT_TRUE(eventually([&] { return runs().size() >= 7; }, std::chrono::seconds(20)));
  auto t = runs();
  const long long expectedMs[] = {50, 100, 200, 200, 200, 200};
  for (size_t i = 0; i < 6; ++i) {
    const long long gapMs = (t[i + 1] - t[i]) / 1000000;
    // Never sooner than the back-off (a run's own time only adds to the gap); never near
    // what doubling without a cap would give by the end (800 and 1,600 ms), even under load.
    EXPECT_GE(gapMs, expectedMs[i] - 5) << "retry " << i + 1;
    EXPECT_LT(gapMs, expectedMs[i] + 550) << "retry " << i + 1;
  }
  EXPECT_GE((*store)->refreshFailures(), 5u);  // the sixth retry may still be running
  EXPECT_FALSE((*store)->get("x").ok());
}

TEST(SecretStore, ExecFailureExpiresTheSecretAndFailsClosed) {
  TempDir dir;
  // Succeeds once, then fails for ever with the secret on stderr.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      "if [ -e \"$0\" ]; then echo 'cannot refresh once-only-secret' >&2; exit 1; fi; "
      "touch \"$0\"; echo once-only-secret",
      dir.file("ran")};
  config::Credentials creds;
  creds["x"] = headerCredential("x", execSource(argv, 0.2), {"a.example"});
  StoreOptions options;
  options.minBackoff = std::chrono::milliseconds(20);
  options.maxBackoff = std::chrono::milliseconds(40);
  auto store = SecretStore::open(creds, "test.yaml", options);
  ASSERT_TRUE(store.ok()) << store.errorText();
  EXPECT_TRUE((*store)->get("x").ok());
  ASSERT_TRUE(eventually([&] { return !(*store)->get("x").ok(); }));
  Fetch f = (*store)->get("x");
  EXPECT_EQ(f.reason, reason::kCredentialUnavailable);
  EXPECT_NE(f.detail.find("expired"), std::string::npos) << f.detail;
  EXPECT_EQ(f.detail.find("once-only-secret"), std::string::npos) << f.detail;
  EXPECT_GE((*store)->refreshFailures(), 1u);
}

TEST(SecretStore, OptionalExecRecoversWithBackoff) {
  TempDir dir;
  // Fails on the first two runs, then succeeds.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      "echo x >> \"$0\"; [ $(wc -l < \"$0\") -ge 3 ] || { echo 'not yet' >&2; exit 1; }; "
      "echo recovered-secret",
      dir.file("runs")};
  config::Credentials creds;
  creds["x"] = headerCredential("x", execSource(argv, 600), {"a.example"});
  creds["x"].optional = true;
  StoreOptions options;
  options.minBackoff = std::chrono::milliseconds(20);
  auto store = SecretStore::open(creds, "test.yaml", options);
  ASSERT_TRUE(store.ok()) << store.errorText();
  Fetch first = (*store)->get("x");
  EXPECT_FALSE(first.ok());
  EXPECT_NE(first.detail.find("not yet"), std::string::npos) << first.detail;
  ASSERT_TRUE(eventually([&] { return (*store)->get("x").ok(); }));
  EXPECT_EQ((*store)->get("x").secret->reveal(), "recovered-secret");
}

TEST(SecretStore, DestructionDoesNotWaitForASlowRefresh) {
  TempDir dir;
  // First run is fast; refreshes hang for 30 s.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      "if [ -e \"$0\" ]; then touch \"$0.refreshing\"; exec sleep 30; fi; touch \"$0\"; echo v",
      dir.file("ran")};
  config::Credentials creds;
  creds["x"] = headerCredential("x", execSource(argv, 0.05), {"a.example"});
  auto store = SecretStore::open(creds, "test.yaml");
  ASSERT_TRUE(store.ok()) << store.errorText();
  std::shared_ptr<const SecretStore> s = std::move(store).value();
  // Wait until the refresh (the hanging run) has started.
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir.file("ran.refreshing")); }));
  auto start = std::chrono::steady_clock::now();
  s.reset();  // the last reference: stops the refresher, which kills the command
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(SecretStore, ConcurrentGets) {
  TempDir dir;
  writeFile(dir.file("f"), "v0\n");
  auto store = SecretStore::open(fileCredential("f", dir.file("f")), "test.yaml");
  ASSERT_TRUE(store.ok());
  std::atomic<bool> bad{false};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 500; ++i) {
          Fetch f = (*store)->get("f");
          // During a rotation a get may fail closed, but never return a torn value.
          if (f.ok() && f.secret->reveal().substr(0, 1) != "v") bad = true;
        }
      });
    }
    for (int i = 1; i < 50; ++i) replaceFile(dir.file("f"), "v" + std::to_string(i) + "\n");
  }
  EXPECT_FALSE(bad);
  EXPECT_EQ((*store)->get("f").secret->reveal(), "v49");
}

}  // namespace
}  // namespace sandgate::broker
