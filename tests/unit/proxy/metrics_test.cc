// Tests of proxy/metrics: series values and labels, cardinality guards, task series removal
// after the TTL (with an injected clock), and concurrent updates.
#include "proxy/observe/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proxy/state/task_limits.h"

namespace sandgate::proxy {
namespace {

using namespace std::chrono;
using Labels = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  Labels labels;
  double value;
};

// A minimal reader of the text exposition format as prometheus-cpp writes it.
std::vector<Sample> parse(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        size_t eq = line.find('=', i);
        std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;  // past ="
        for (; line[j] != '"'; ++j) {
          if (line[j] == '\\') ++j;
          value += line[j];
        }
        s.labels[key] = value;
        i = j + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    s.value = std::stod(line.substr(i + 1));
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<double> value(Metrics& m, const std::string& name, const Labels& labels) {
  for (const auto& s : parse(m.render())) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

// Every sample of `name` for task `task`.
std::vector<Sample> ofTask(Metrics& m, const std::string& name, const std::string& task) {
  std::vector<Sample> out;
  for (const auto& s : parse(m.render())) {
    auto it = s.labels.find("task");
    if (s.name == name && it != s.labels.end() && it->second == task) out.push_back(s);
  }
  return out;
}

bool mentionsTask(Metrics& m, const std::string& task) {
  return m.render().find("task=\"" + task + "\"") != std::string::npos;
}

const steady_clock::time_point kT0 = steady_clock::time_point() + hours(1000);

TEST(Metrics, ConfigInfoShowsOnlyTheDigestInUse) {
  Metrics m(seconds(60));
  m.configInfo("aaaa");
  EXPECT_EQ(value(m, "sandgate_config_info", {{"sha256", "aaaa"}}), 1.0);
  m.configInfo("bbbb");  // a reload: the old digest must go, or replicas would look split
  EXPECT_EQ(value(m, "sandgate_config_info", {{"sha256", "bbbb"}}), 1.0);
  EXPECT_EQ(value(m, "sandgate_config_info", {{"sha256", "aaaa"}}), std::nullopt);
  size_t series = 0;
  for (const auto& s : parse(m.render())) series += s.name == "sandgate_config_info";
  EXPECT_EQ(series, 1u);
}

TEST(Metrics, CredentialInjectionsAreCountedByHow) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  t->credentialInjection("api", "ok", "injected");
  t->credentialInjection("api", "ok", "placeholder");
  t->credentialInjection("api", "ok", "placeholder");
  t->credentialInjection("api", "placeholder_misplaced", "placeholder");
  t->credentialInjection("api", "ok", "anything else");  // a bounded label: counted as injected
  const std::string name = "sandgate_credential_injections_total";
  auto labels = [](const char* result, const char* how) {
    return Labels{{"task", "demo"}, {"credential", "api"}, {"result", result}, {"how", how}};
  };
  EXPECT_EQ(value(m, name, labels("ok", "injected")), 2);
  EXPECT_EQ(value(m, name, labels("ok", "placeholder")), 2);
  EXPECT_EQ(value(m, name, labels("placeholder_misplaced", "placeholder")), 1);
  EXPECT_EQ(ofTask(m, name, "demo").size(), 3u);
}

TEST(Metrics, GlobalSeriesExistFromTheStart) {
  Metrics m(seconds(60));
  auto samples = parse(m.render());
  bool buildInfo = false;
  for (const auto& s : samples) {
    if (s.name == "sandgate_build_info") {
      buildInfo = true;
      EXPECT_EQ(s.value, 1);
      ASSERT_EQ(s.labels.count("version"), 1u);
      EXPECT_FALSE(s.labels.at("version").empty());
    }
  }
  EXPECT_TRUE(buildInfo);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "ok"}}), 0);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "error"}}), 0);
  EXPECT_EQ(value(m, "sandgate_upstream_connect_seconds_count", {{"parent", "direct"}}), 0);
  EXPECT_EQ(value(m, "sandgate_credential_files_unwatched", {}), 0);
}

TEST(Metrics, UnwatchedCredentialFilesIsSetNotAdded) {
  Metrics m(seconds(60));
  m.unwatchedCredentialFiles(3);
  EXPECT_EQ(value(m, "sandgate_credential_files_unwatched", {}), 3);
  m.unwatchedCredentialFiles(1);
  EXPECT_EQ(value(m, "sandgate_credential_files_unwatched", {}), 1);
}

TEST(Metrics, ConfigReloadsAndConnectTimes) {
  Metrics m(seconds(60));
  m.configReload(true);
  m.configReload(true);
  m.configReload(false);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "ok"}}), 2);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "error"}}), 1);
  m.upstreamConnectSeconds(0.003);
  m.upstreamConnectSeconds(0.2);
  EXPECT_EQ(value(m, "sandgate_upstream_connect_seconds_count", {{"parent", "direct"}}), 2);
  EXPECT_DOUBLE_EQ(*value(m, "sandgate_upstream_connect_seconds_sum", {{"parent", "direct"}}),
                   0.203);
  EXPECT_EQ(value(m, "sandgate_upstream_connect_seconds_bucket",
                  {{"parent", "direct"}, {"le", "0.0025"}}),
            0);
  EXPECT_EQ(
      value(m, "sandgate_upstream_connect_seconds_bucket", {{"parent", "direct"}, {"le", "0.005"}}),
      1);
  EXPECT_EQ(
      value(m, "sandgate_upstream_connect_seconds_bucket", {{"parent", "direct"}, {"le", "+Inf"}}),
      2);
}

TEST(Metrics, TaskSeriesValuesAndLabels) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  t->request("forward", "allow", "allowed");
  t->request("forward", "allow", "allowed", 0.2);
  t->request("tunnel", "deny", "no_matching_rule");
  t->connectionOpened();
  t->connectionOpened();
  t->connectionOpened();
  t->connectionClosed();
  t->bytesUp(100);
  t->bytesUp(23);
  t->bytesDown(uint64_t{1} << 40);
  using L = Labels;
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            L{{"task", "demo"}, {"kind", "forward"}, {"verdict", "allow"}, {"reason", "allowed"}}),
      2);
  EXPECT_EQ(value(m, "sandgate_requests_total",
                  L{{"task", "demo"},
                    {"kind", "tunnel"},
                    {"verdict", "deny"},
                    {"reason", "no_matching_rule"}}),
            1);
  EXPECT_EQ(ofTask(m, "sandgate_requests_total", "demo").size(), 2u);
  EXPECT_EQ(value(m, "sandgate_connections_active", L{{"task", "demo"}}), 2);
  EXPECT_EQ(value(m, "sandgate_bytes_total", L{{"task", "demo"}, {"direction", "up"}}), 123);
  EXPECT_EQ(value(m, "sandgate_bytes_total", L{{"task", "demo"}, {"direction", "down"}}),
            1099511627776.0);
  const L fwd{{"task", "demo"}, {"kind", "forward"}, {"verdict", "allow"}};
  EXPECT_EQ(value(m, "sandgate_request_duration_seconds_count", fwd), 1);
  EXPECT_DOUBLE_EQ(*value(m, "sandgate_request_duration_seconds_sum", fwd), 0.2);
  auto bucket = [&](const char* le) {
    L l = fwd;
    l["le"] = le;
    return value(m, "sandgate_request_duration_seconds_bucket", l);
  };
  EXPECT_EQ(bucket("0.1"), 0);
  EXPECT_EQ(bucket("0.25"), 1);
  // A request given no latency is counted but not observed: no histogram for the refusal.
  EXPECT_EQ(ofTask(m, "sandgate_request_duration_seconds_count", "demo").size(), 1u);
}

// Tunnel lifetimes are their own counter and histogram (mode, verdict, reason), so an hour-long
// tunnel does not land in the request latency buckets, and any other mode is "spliced".
TEST(Metrics, TunnelEndsAreCountedApartFromRequests) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  t->tunnelEnded("intercepted", "allow", "allowed", 1800);
  t->tunnelEnded("spliced", "deny", "revoked_by_reload", 2);
  t->tunnelEnded("websocket", "allow", "idle_timeout", 30);
  t->tunnelEnded("anything", "allow", "allowed", 0.3);
  using L = Labels;
  auto ended = [&](const char* mode, const char* verdict, const char* reason) {
    return value(m, "sandgate_tunnels_total",
                 L{{"task", "demo"}, {"mode", mode}, {"verdict", verdict}, {"reason", reason}});
  };
  EXPECT_EQ(ended("intercepted", "allow", "allowed"), 1);
  EXPECT_EQ(ended("spliced", "deny", "revoked_by_reload"), 1);
  EXPECT_EQ(ended("spliced", "allow", "allowed"), 1);
  EXPECT_EQ(ended("websocket", "allow", "idle_timeout"), 1);
  EXPECT_EQ(
      value(m, "sandgate_tunnel_duration_seconds_count", L{{"task", "demo"}, {"mode", "spliced"}}),
      2);
  EXPECT_EQ(value(m, "sandgate_tunnel_duration_seconds_bucket",
                  L{{"task", "demo"}, {"mode", "intercepted"}, {"le", "900"}}),
            0);
  EXPECT_EQ(value(m, "sandgate_tunnel_duration_seconds_bucket",
                  L{{"task", "demo"}, {"mode", "intercepted"}, {"le", "1800"}}),
            1);
  EXPECT_TRUE(ofTask(m, "sandgate_requests_total", "demo").empty());
  EXPECT_TRUE(ofTask(m, "sandgate_request_duration_seconds_count", "demo").empty());
}

// The leaf cache reports running totals from any worker, in any order: the counters only move
// forward, by what is new.
TEST(Metrics, LeafCacheLookupsAreCounters) {
  Metrics m(seconds(60));
  m.leafCache(3, 1);
  m.leafCache(2, 1);  // an older total reported late: nothing to add
  m.leafCache(5, 2);
  EXPECT_EQ(value(m, "sandgate_leaf_cache_lookups_total", {{"result", "hit"}}), 5);
  EXPECT_EQ(value(m, "sandgate_leaf_cache_lookups_total", {{"result", "miss"}}), 2);
  EXPECT_NE(m.render().find("# TYPE sandgate_leaf_cache_lookups_total counter"), std::string::npos);
}

// The reload gauge stays 0 while a refused config is the newest one, which an alert can hold on
// (a 10-minute increase() forgets it).
TEST(Metrics, LastReloadSuccessfulFollowsTheNewestAttempt) {
  Metrics m(seconds(60));
  m.configLoaded();
  EXPECT_EQ(value(m, "sandgate_config_last_reload_successful", {}), 1);
  const double loadedAt = *value(m, "sandgate_config_last_reload_success_timestamp_seconds", {});
  EXPECT_GT(loadedAt, 1.7e9);
  m.configReload(false);
  EXPECT_EQ(value(m, "sandgate_config_last_reload_successful", {}), 0);
  EXPECT_EQ(value(m, "sandgate_config_last_reload_success_timestamp_seconds", {}), loadedAt);
  m.configReload(false);
  EXPECT_EQ(value(m, "sandgate_config_last_reload_successful", {}), 0);
  m.configReload(true);
  EXPECT_EQ(value(m, "sandgate_config_last_reload_successful", {}), 1);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "error"}}), 2);
  EXPECT_EQ(value(m, "sandgate_config_reloads_total", {{"result", "ok"}}), 1);
}

// The process_* metrics of the official client libraries, read at scrape time.
TEST(Metrics, ProcessMetricsDescribeThisProcess) {
  Metrics m(seconds(60));
  auto rss = value(m, "process_resident_memory_bytes", {});
  ASSERT_TRUE(rss.has_value());
  EXPECT_GT(*rss, 1 << 20);
  auto fds = value(m, "process_open_fds", {});
  ASSERT_TRUE(fds.has_value());
  const int extra = ::dup(0);
  EXPECT_EQ(value(m, "process_open_fds", {}), *fds + 1);
  ::close(extra);
  auto start = value(m, "process_start_time_seconds", {});
  ASSERT_TRUE(start.has_value());
  const double now = duration<double>(system_clock::now().time_since_epoch()).count();
  EXPECT_LE(*start, now + 1);
  EXPECT_GT(*start, now - 24 * 3600);  // this test process started today
  EXPECT_GE(*value(m, "process_cpu_seconds_total", {}), 0);
  EXPECT_GE(*value(m, "process_threads", {}), 1);
  EXPECT_TRUE(value(m, "process_max_fds", {}).has_value());
  EXPECT_NE(m.render().find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
}

// sandgate_tunnels_active follows the tunnel slots a task holds on this replica: a slot made
// with the task's metrics counts until it is released (moved slots count once).
TEST(Metrics, TunnelsActiveFollowTheTaskSlots) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  auto state = std::make_shared<TaskState>();
  using L = Labels;
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 0);
  ASSERT_TRUE(state->tryAcquireTunnel(4));
  TaskSlot first(state, TaskSlot::Kind::kTunnel, t);
  ASSERT_TRUE(state->tryAcquireTunnel(4));
  TaskSlot second(state, TaskSlot::Kind::kTunnel, t);
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 2);
  TaskSlot moved(std::move(second));
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 2);
  moved.reset();
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 1);
  EXPECT_EQ(state->tunnels(), 1u);
  first = TaskSlot();
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 0);
  EXPECT_EQ(state->tunnels(), 0u);
  // A connection slot is not a tunnel.
  ASSERT_TRUE(state->tryAcquireConnection(4));
  { TaskSlot conn(state, TaskSlot::Kind::kConnection, t); }
  EXPECT_EQ(value(m, "sandgate_tunnels_active", L{{"task", "demo"}}), 0);
}

TEST(Metrics, TasksAreSeparateAndHandlesShared) {
  Metrics m(seconds(60));
  auto a1 = m.task("a");
  auto a2 = m.task("a");
  auto b = m.task("b");
  EXPECT_EQ(a1.get(), a2.get());
  EXPECT_NE(a1.get(), b.get());
  a1->bytesUp(1);
  a2->bytesUp(1);
  b->bytesUp(5);
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "a"}, {"direction", "up"}}), 2);
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "b"}, {"direction", "up"}}), 5);
  EXPECT_EQ(m.taskCount(), 2u);
}

TEST(Metrics, LabelValuesThatAreNotTokensBecomeOther) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  struct Case {
    const char* name;
    std::string value;
  };
  const std::vector<Case> cases = {
      {"host_and_path", "evil.example.com/path?key=sk-secret"},
      {"upper_case", "Allowed"},
      {"empty", ""},
      {"quote_newline", "a\"b\nc"},
      {"too_long", std::string(TaskMetrics::kMaxTokenBytes + 1, 'a')},
  };
  for (const auto& c : cases) t->request("forward", "deny", c.value);
  t->request(cases[0].value, "deny", "denied_by_rule");
  t->request("forward", cases[0].value, "denied_by_rule");
  std::string text = m.render();
  EXPECT_EQ(text.find("evil"), std::string::npos);
  EXPECT_EQ(text.find("secret"), std::string::npos);
  EXPECT_EQ(text.find("Allowed"), std::string::npos);
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            {{"task", "demo"}, {"kind", "forward"}, {"verdict", "deny"}, {"reason", "other"}}),
      static_cast<double>(cases.size()));
  EXPECT_EQ(
      value(
          m, "sandgate_requests_total",
          {{"task", "demo"}, {"kind", "other"}, {"verdict", "deny"}, {"reason", "denied_by_rule"}}),
      1);
  EXPECT_EQ(value(m, "sandgate_requests_total",
                  {{"task", "demo"},
                   {"kind", "forward"},
                   {"verdict", "other"},
                   {"reason", "denied_by_rule"}}),
            1);
  // A token exactly at the length limit is kept.
  std::string longest(TaskMetrics::kMaxTokenBytes, 'z');
  t->request("forward", "deny", longest);
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            {{"task", "demo"}, {"kind", "forward"}, {"verdict", "deny"}, {"reason", longest}}),
      1);
}

TEST(Metrics, DistinctReasonsPerTaskAreCapped) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  auto other = m.task("other_task");
  constexpr int kReasons = 100;
  for (int i = 0; i < kReasons; ++i) t->request("forward", "deny", "r" + std::to_string(i));
  for (int i = 0; i < kReasons; ++i) t->request("forward", "deny", "r" + std::to_string(i));
  auto series = ofTask(m, "sandgate_requests_total", "demo");
  EXPECT_EQ(series.size(), TaskMetrics::kMaxReasons + 1);  // the admitted ones plus "other"
  double total = 0;
  for (const auto& s : series) total += s.value;
  EXPECT_EQ(total, 2 * kReasons);  // nothing is lost, only folded
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            {{"task", "demo"}, {"kind", "forward"}, {"verdict", "deny"}, {"reason", "other"}}),
      2.0 * (kReasons - TaskMetrics::kMaxReasons));
  EXPECT_EQ(value(m, "sandgate_requests_total",
                  {{"task", "demo"}, {"kind", "forward"}, {"verdict", "deny"}, {"reason", "r0"}}),
            2);
  // The cap is per task: another task still gets its own values.
  other->request("forward", "deny", "r99");
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            {{"task", "other_task"}, {"kind", "forward"}, {"verdict", "deny"}, {"reason", "r99"}}),
      1);
}

TEST(Metrics, DistinctKindsAndVerdictsAreCapped) {
  Metrics m(seconds(60));
  auto t = m.task("demo");
  for (int i = 0; i < 20; ++i) {
    t->request("k" + std::to_string(i), "v" + std::to_string(i), "allowed");
  }
  std::set<std::string> kinds, verdicts;
  for (const auto& s : ofTask(m, "sandgate_requests_total", "demo")) {
    kinds.insert(s.labels.at("kind"));
    verdicts.insert(s.labels.at("verdict"));
  }
  EXPECT_EQ(kinds.size(), TaskMetrics::kMaxKinds + 1);
  EXPECT_EQ(verdicts.size(), TaskMetrics::kMaxVerdicts + 1);
  EXPECT_TRUE(kinds.count("other"));
}

TEST(Metrics, SeriesOfAReleasedTaskAreRemovedAfterTheTtl) {
  Metrics m(seconds(10));
  {
    auto t = m.task("gone");
    t->request("forward", "allow", "allowed", 0.1);
    t->tunnelEnded("spliced", "allow", "allowed", 2);
    t->connectionOpened();
    t->bytesUp(1);
    t->connectionClosed();
    m.sweep(kT0 - seconds(100));  // held: a sweep does not start the clock
  }
  auto kept = m.task("kept");  // held throughout: never removed
  kept->bytesUp(7);
  EXPECT_TRUE(mentionsTask(m, "gone"));
  m.sweep(kT0);  // first sweep that finds it released
  EXPECT_TRUE(mentionsTask(m, "gone"));
  m.sweep(kT0 + seconds(9));
  EXPECT_TRUE(mentionsTask(m, "gone"));
  EXPECT_EQ(m.taskCount(), 2u);
  m.sweep(kT0 + seconds(10));
  EXPECT_FALSE(mentionsTask(m, "gone")) << m.render();
  EXPECT_EQ(m.taskCount(), 1u);
  m.sweep(kT0 + hours(24));
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "kept"}, {"direction", "up"}}), 7);
}

TEST(Metrics, TaskComingBackBeforeTheTtlKeepsItsCounts) {
  Metrics m(seconds(10));
  m.task("x")->bytesUp(3);
  m.sweep(kT0);
  {
    auto again = m.task("x");
    again->bytesUp(4);
    m.sweep(kT0 + seconds(10));  // held now: not removed, idle clock reset
  }
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "x"}, {"direction", "up"}}), 7);
  m.sweep(kT0 + seconds(11));  // released again: the clock restarts here
  m.sweep(kT0 + seconds(20));
  EXPECT_TRUE(mentionsTask(m, "x"));
  m.sweep(kT0 + seconds(21));
  EXPECT_FALSE(mentionsTask(m, "x"));
}

TEST(Metrics, TaskAfterRemovalStartsAfresh) {
  Metrics m(seconds(0));
  m.task("x")->bytesDown(5);
  m.sweep(kT0);
  EXPECT_FALSE(mentionsTask(m, "x"));
  auto t = m.task("x");
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "x"}, {"direction", "down"}}), 0);
  t->request("forward", "allow", "allowed");
  EXPECT_EQ(ofTask(m, "sandgate_requests_total", "x").size(), 1u);
}

TEST(Metrics, HolderMayOutliveMetrics) {
  auto m = std::make_unique<Metrics>(seconds(1));
  auto t = m->task("x");
  m.reset();
  t->request("forward", "allow", "allowed");  // still valid memory (ASan checks this)
  t->bytesUp(1);
  t->connectionClosed();
}

TEST(Metrics, Ready) {
  Metrics m(seconds(1));
  EXPECT_FALSE(m.ready());
  m.setReady(true);
  EXPECT_TRUE(m.ready());
  m.setReady(false);
  EXPECT_FALSE(m.ready());
}

TEST(Metrics, ConcurrentUpdatesAreExact) {
  Metrics m(seconds(0));
  constexpr int kThreads = 4, kOps = 20000;
  auto hold = m.task("hot");  // the connections below may not overlap; keep the series
  std::atomic<bool> stop{false};
  // Meanwhile another thread churns a different task and sweeps, as the server does.
  std::thread churn([&] {
    int i = 0;
    while (!stop.load()) {
      m.task("churn")->request("forward", "allow", "allowed");
      m.sweep(kT0 + seconds(i++));
      (void)m.render();
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto t = m.task("hot");  // each connection caches its own handle
      for (int k = 0; k < kOps; ++k) {
        t->bytesUp(1);
        t->bytesDown(2);
        t->connectionOpened();
        t->request("tunnel", "allow", (k % 2) ? "allowed" : std::string("r") + std::to_string(i));
        t->connectionClosed();
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  churn.join();
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "hot"}, {"direction", "up"}}),
            kThreads * kOps);
  EXPECT_EQ(value(m, "sandgate_bytes_total", {{"task", "hot"}, {"direction", "down"}}),
            2.0 * kThreads * kOps);
  EXPECT_EQ(value(m, "sandgate_connections_active", {{"task", "hot"}}), 0);
  EXPECT_EQ(
      value(m, "sandgate_requests_total",
            {{"task", "hot"}, {"kind", "tunnel"}, {"verdict", "allow"}, {"reason", "allowed"}}),
      kThreads * kOps / 2);
}

// sandgate_ssh_* (issue #42): label values are the task and reason tokens only, capped; the
// task's series go with it.
TEST(Metrics, SshSeriesAreTokensAndGoWithTheTask) {
  Metrics m(seconds(10));
  {
    auto t = m.task("git");
    t->sshSessionStarted();
    t->sshSessionStarted();
    t->sshSessionEnded();
    t->sshRefusal("ssh_command_refused");
    t->sshRefusal("git.example.com/org/repo");  // not a token: counted as other
    for (int i = 0; i < 40; ++i) t->sshRefusal("git_reason_" + std::to_string(i));
    t->sshBytes(10, 2000);
    t->sshHostKeyMismatch();
    EXPECT_EQ(value(m, "sandgate_ssh_sessions_total", {{"task", "git"}}), 2);
    EXPECT_EQ(value(m, "sandgate_ssh_sessions_active", {{"task", "git"}}), 1);
    EXPECT_EQ(value(m, "sandgate_ssh_refusals_total",
                    {{"task", "git"}, {"reason", "ssh_command_refused"}}),
              1);
    EXPECT_EQ(value(m, "sandgate_ssh_bytes_total", {{"task", "git"}, {"direction", "down"}}), 2000);
    EXPECT_EQ(value(m, "sandgate_ssh_upstream_host_key_mismatches_total", {{"task", "git"}}), 1);
    EXPECT_EQ(m.render().find("example"), std::string::npos);
    // At most kMaxReasons distinct reasons, the rest and the non-token "other".
    EXPECT_LE(ofTask(m, "sandgate_ssh_refusals_total", "git").size(), TaskMetrics::kMaxReasons + 1);
    EXPECT_GE(value(m, "sandgate_ssh_refusals_total", {{"task", "git"}, {"reason", "other"}}), 1);
  }
  m.sweep(kT0);
  m.sweep(kT0 + seconds(11));
  EXPECT_FALSE(mentionsTask(m, "git"));
}

}  // namespace
}  // namespace sandgate::proxy
