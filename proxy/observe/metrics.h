// Prometheus metrics of the proxy: per-task series with cached handles, cardinality guards,
// and removal of a task's series some time after its last connection is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace sandgate::proxy {

class Metrics;

// The series of one task. Every update is an atomic operation on a cached handle (no global
// lock); request() takes this task's own small mutex to find the counter for its labels.
// Callers obtain it from Metrics::task() and keep the shared_ptr for the connection's life:
// holding it is what keeps the task's series alive.
class TaskMetrics {
 public:
  // Label values must be bounded tokens ([a-z0-9_], at most kMaxTokenBytes, e.g. the
  // policy::reason constants); anything else is counted as "other", and so is a value past
  // the per-task cap of distinct values for that label (kMaxKinds/kMaxVerdicts/kMaxReasons).
  // Hosts, paths and secrets must never be passed here.
  //
  // sandgate_requests_total counts each thing the client asked for once: a forwarded request,
  // a spliced CONNECT, a refused CONNECT, each request inside an intercepted tunnel (kind
  // intercept or websocket), a DNS answer. `seconds`, when given, is the request's latency
  // (sandgate_request_duration_seconds{task,kind,verdict}); a tunnel's or a WebSocket's life is
  // tunnelEnded()'s, not a latency.
  void request(std::string_view kind, std::string_view verdict, std::string_view reason,
               std::optional<double> seconds = std::nullopt);
  // sandgate_tunnels_total{task,mode,verdict,reason} and sandgate_tunnel_duration_seconds{task,
  // mode}: a tunnel that was established ended. `mode` is "spliced", "intercepted" or
  // "websocket" (an intercepted request the upstream switched to WebSocket).
  void tunnelEnded(std::string_view mode, std::string_view verdict, std::string_view reason,
                   double seconds);
  void connectionOpened();
  void connectionClosed();
  // sandgate_tunnels_active: a task's CONNECT tunnels held now (TaskSlot of kind kTunnel).
  void tunnelOpened();
  void tunnelClosed();
  void bytesUp(uint64_t n);
  void bytesDown(uint64_t n);
  // A secret sent upstream (`result` "ok") or refused (a reason token). `credential` is a
  // config key (bounded); `how` is "injected" (sandgate added it for the admitting rule) or
  // "placeholder" (the sandbox's placeholder stood where it is injected, or was refused).
  void credentialInjection(std::string_view credential, std::string_view result,
                           std::string_view how);
  void secretScrubs(std::string_view credential, uint64_t n);
  // sandgate_git_push_refs_total: `n` refs of pushes under a rule's `git:` block, by their
  // verdict ("allowed" or a git_* reason token).
  void gitPushRefs(std::string_view reason, uint64_t n);
  void tlsIntercepted();
  // sandgate_budget_fail_open_total{task}: a request admitted although the shared budget
  // counters (state.redis with `fail: open`) could not count it.
  void budgetFailOpen();
  // An LLM call that went upstream ended (exchange/llm_gate.h; its audit line's "llm" field):
  // sandgate_llm_tokens_total{task,model,kind}, sandgate_llm_spend_total{task,model} (in the
  // config's currency) and sandgate_llm_calls_total{task,model,outcome}. `model` is a label
  // only when the config names it (Metrics::llmModels), else "other": the client chooses it.
  // `outcome`: "ok", "no_usage" (charged its reserve) or "upstream_error".
  void llmCall(std::string_view model, std::string_view outcome, int64_t inputTokens,
               int64_t outputTokens, int64_t spendMicros);
  // sandgate_llm_refusals_total{task,reason}: an LLM call sandgate answered itself.
  void llmRefusal(std::string_view reason);
  // The SSH broker (issue #42): sandgate_ssh_sessions_total{task} and
  // sandgate_ssh_sessions_active{task} (sessions served after the CONNECT's 200),
  // sandgate_ssh_refusals_total{task,reason} (each refusal inside a session, and the reason
  // that ended one; reason tokens only, capped like the others), sandgate_ssh_bytes_total{task,
  // direction} (git payload relayed, up: to the upstream) and
  // sandgate_ssh_upstream_host_key_mismatches_total{task}.
  void sshSessionStarted();
  void sshSessionEnded();
  void sshRefusal(std::string_view reason);
  void sshBytes(uint64_t up, uint64_t down);
  void sshHostKeyMismatch();

  static constexpr size_t kMaxTokenBytes = 48;
  static constexpr size_t kMaxKinds = 8;
  static constexpr size_t kMaxVerdicts = 8;
  static constexpr size_t kMaxReasons = 32;
  static constexpr size_t kMaxModels = 32;  // distinct model labels per task, then "other"

  ~TaskMetrics();
  TaskMetrics(const TaskMetrics&) = delete;
  TaskMetrics& operator=(const TaskMetrics&) = delete;

 private:
  friend class Metrics;
  struct Families;
  TaskMetrics(std::shared_ptr<const Families> families, std::string name);
  void removeSeries();     // called by Metrics once no one holds this task any more
  void removeLlmSeries();  // llm_metrics.cc; with mu_ held

  // The families live in the registry, which this keeps alive: a connection that outlives
  // the Metrics object still updates valid counters.
  std::shared_ptr<const Families> families_;
  const std::string name_;
  prometheus::Gauge* active_;
  prometheus::Gauge* tunnels_;
  prometheus::Counter* bytesUp_;
  prometheus::Counter* bytesDown_;

  std::mutex mu_;
  // Keyed by "kind|verdict|reason" (tokens never contain '|'); tunnelEnds_ by
  // "mode|verdict|reason".
  std::map<std::string, prometheus::Counter*, std::less<>> requests_, tunnelEnds_;
  // Keyed by "kind|verdict" (latencies) and "mode" (tunnel lifetimes).
  std::map<std::string, prometheus::Histogram*, std::less<>> latency_, lifetime_;
  // Keyed by "family|credential|result"; credentials are config keys, so bounded. Git push
  // refs are "g||reason" (reasons are the catalogue's tokens).
  std::map<std::string, prometheus::Counter*, std::less<>> broker_;
  prometheus::Counter* intercepted_;
  prometheus::Gauge* sshActive_ = nullptr;  // under mu_; made by the task's first SSH session
  // Keyed by a tag ('S' sessions, 'R' refusals, 'U'/'D' bytes, 'K' mismatches) and the reason.
  std::map<std::string, prometheus::Counter*, std::less<>> ssh_;
  prometheus::Counter& sshCounter(char tag, std::string_view reason);  // under mu_
  std::string_view sshReason(std::string_view reason);                 // under mu_
  static void registerSshFamilies(Families& families);                 // ssh_metrics.cc
  void removeSshSeries();                                              // under mu_
  std::set<std::string, std::less<>> sshReasons_;
  std::set<std::string, std::less<>> kinds_, verdicts_, reasons_;  // distinct values admitted
  // The sandgate_llm_* series, keyed "t|model|kind", "s|model|", "c|model|outcome" and
  // "r||reason"; models_ the distinct model labels admitted (llm_metrics.cc).
  std::map<std::string, prometheus::Counter*, std::less<>> llm_;
  std::set<std::string, std::less<>> models_;
};

// One budget of one task, as the gauges sandgate_budget_used and sandgate_budget_limit show it
// (labels task, budget, window, metric). Spend is in the config's currency.
struct BudgetGauge {
  std::string task, budget, window, metric;
  double used = 0, limit = 0;
};

class Metrics {
 public:
  explicit Metrics(std::chrono::seconds taskSeriesTtl);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The task's series handles; callers cache the result per connection. The series stay
  // while anyone holds a returned pointer, and for taskSeriesTtl after the last one is gone.
  std::shared_ptr<TaskMetrics> task(const std::string& name);

  // sandgate_config_reloads_total{result}, sandgate_config_last_reload_successful (0 while a
  // refused config is the newest one seen) and, on success,
  // sandgate_config_last_reload_success_timestamp_seconds. The start-up load counts as a
  // successful load (not as a reload) through configLoaded().
  void configReload(bool ok);
  void configLoaded();
  // sandgate_config_info{sha256="…"} 1 for the config now in use (replaces the previous one).
  void configInfo(const std::string& sha256);
  // sandgate_upstream_connect_seconds{parent}: "direct", or the parent proxy it went through.
  void upstreamConnectSeconds(double s, std::string_view parent = {});
  // sandgate_parent_connect_seconds{parent} (TCP to the parent) and
  // sandgate_parent_failures_total{parent,reason} (parent_unreachable, parent_refused, ...).
  void parentConnectSeconds(std::string_view parent, double s);
  void parentFailure(std::string_view parent, std::string_view reason);
  // The leaf cache's running totals (the cache counts itself): the counters
  // sandgate_leaf_cache_lookups_total{result} advance by what is new since the last call.
  void leafCache(uint64_t hits, uint64_t misses);
  // File credential sources that cannot watch their file now (broker::unwatchedFileSources()).
  void unwatchedCredentialFiles(size_t n);
  // The model names that may be a label of the sandgate_llm_* series (those the config lists
  // in a rule's `llm.models` or prices); every other model is "other". Set on each load.
  void llmModels(std::set<std::string, std::less<>> models);
  // What render() shows as the budget gauges: `source` is called at each scrape (on the
  // metrics endpoint's thread: it must not wait on anything) and its gauges replace the last
  // ones (a budget a reload removed goes away). Set on each load; empty: no gauges.
  void budgetSource(std::function<std::vector<BudgetGauge>()> source);

  // Removes the series of every task that nobody has held for at least taskSeriesTtl. The
  // idle time is measured from the first sweep that finds the task unheld, so the server
  // should call this every few seconds (or every taskSeriesTtl/10, whichever is longer);
  // a series then disappears between TTL and TTL + one sweep interval after its last use.
  void sweep(std::chrono::steady_clock::time_point now);

  // Number of tasks whose series currently exist (tests, debugging).
  size_t taskCount() const;

  // Prometheus text exposition format 0.0.4: every family of the registry, then the process_*
  // metrics read from /proc/self at the time of the call (proxy/observe/process_metrics.h).
  std::string render();
  void setReady(bool r) { ready_.store(r, std::memory_order_relaxed); }
  bool ready() const { return ready_.load(std::memory_order_relaxed); }

  // For components that want to add their own families to the same exposition.
  std::shared_ptr<prometheus::Registry> registry() const;

 private:
  std::string parentLabel(std::string_view parent);
  struct State;
  std::shared_ptr<State> state_;
  std::atomic<bool> ready_{false};
};

}  // namespace sandgate::proxy
