// Prometheus metrics of the proxy: families, per-task handles, cardinality guards, sweeping.
#include "proxy/observe/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <optional>
#include <unordered_map>

#include "proxy/observe/metric_families.h"
#include "proxy/observe/process_metrics.h"

#ifndef SANDGATE_VERSION
#define SANDGATE_VERSION "unknown"
#endif

namespace sandgate::proxy {
namespace {

constexpr std::string_view kOther = kOtherLabel;

// The key of a broker series in TaskMetrics::broker_: "i|credential|result" (an injection) or
// "s|credential|" (scrubs). Put together by hand: fmt::format cost some 500 instructions, once
// per intercepted request.
std::string brokerKey(char kind, std::string_view credential, std::string_view result) {
  std::string key;
  key.reserve(credential.size() + result.size() + 3);
  key.push_back(kind);
  key.push_back('|');
  key.append(credential).append("|").append(result);
  return key;
}

// Request latencies: sub-millisecond refusals to slow uploads and long model answers.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
// Tunnel and WebSocket lifetimes: a quick fetch to an agent's hours-long session.
const prometheus::Histogram::BucketBoundaries kLifetimeBuckets = {
    0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400};
const prometheus::Histogram::BucketBoundaries kConnectBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

}  // namespace

bool isMetricToken(std::string_view v) {
  if (v.empty() || v.size() > TaskMetrics::kMaxTokenBytes) return false;
  for (char c : v) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

std::string_view admitLabel(std::set<std::string, std::less<>>& seen, std::string_view v,
                            size_t cap) {
  if (!isMetricToken(v)) return kOther;
  if (auto it = seen.find(v); it != seen.end()) return *it;
  if (seen.size() >= cap) return kOther;
  return *seen.emplace(v).first;
}

TaskMetrics::TaskMetrics(std::shared_ptr<const Families> families, std::string name)
    : families_(std::move(families)), name_(std::move(name)) {
  active_ = &families_->active->Add({{"task", name_}});
  tunnels_ = &families_->tunnels->Add({{"task", name_}});
  bytesUp_ = &families_->bytes->Add({{"task", name_}, {"direction", "up"}});
  bytesDown_ = &families_->bytes->Add({{"task", name_}, {"direction", "down"}});
  intercepted_ = &families_->intercepted->Add({{"task", name_}});
}

void TaskMetrics::credentialInjection(std::string_view credential, std::string_view result,
                                      std::string_view how) {
  const std::string_view shownHow = how == "placeholder" ? "placeholder" : "injected";
  std::lock_guard lock(mu_);
  std::string key = brokerKey('i', credential, result);
  key.append("|").append(shownHow);
  auto it = broker_.find(key);
  if (it == broker_.end()) {
    auto& c = families_->injections->Add({{"task", name_},
                                          {"credential", std::string(credential)},
                                          {"result", std::string(result)},
                                          {"how", std::string(shownHow)}});
    it = broker_.emplace(std::move(key), &c).first;
  }
  it->second->Increment();
}

void TaskMetrics::secretScrubs(std::string_view credential, uint64_t n) {
  std::lock_guard lock(mu_);
  std::string key = brokerKey('s', credential, {});
  auto it = broker_.find(key);
  if (it == broker_.end()) {
    auto& c = families_->scrubs->Add({{"task", name_}, {"credential", std::string(credential)}});
    it = broker_.emplace(std::move(key), &c).first;
  }
  it->second->Increment(static_cast<double>(n));
}

void TaskMetrics::gitPushRefs(std::string_view reason, uint64_t n) {
  std::lock_guard lock(mu_);
  const std::string_view r = isMetricToken(reason) ? reason : kOther;
  std::string key = brokerKey('g', {}, r);
  auto it = broker_.find(key);
  if (it == broker_.end()) {
    auto& c = families_->gitRefs->Add({{"task", name_}, {"reason", std::string(r)}});
    it = broker_.emplace(std::move(key), &c).first;
  }
  it->second->Increment(static_cast<double>(n));
}

void TaskMetrics::budgetFailOpen() {
  std::lock_guard lock(mu_);
  std::string key = brokerKey('f', {}, {});
  auto it = broker_.find(key);
  if (it == broker_.end()) {
    it = broker_.emplace(std::move(key), &families_->budgetFailOpen->Add({{"task", name_}})).first;
  }
  it->second->Increment();
}

// The SSH refusal reasons share the caps of the others.
std::string_view TaskMetrics::sshReason(std::string_view reason) {
  return admitLabel(sshReasons_, reason, kMaxReasons);
}

void TaskMetrics::tlsIntercepted() { intercepted_->Increment(); }

TaskMetrics::~TaskMetrics() = default;

namespace {

// The counter of `family` for `task`, `kindLabel`=k, verdict=v, reason=r, cached in `cache`.
prometheus::Counter& outcomeCounter(std::map<std::string, prometheus::Counter*, std::less<>>& cache,
                                    prometheus::Family<prometheus::Counter>& family,
                                    const std::string& task, const char* kindLabel,
                                    std::string_view k, std::string_view v, std::string_view r) {
  std::string key;
  key.reserve(k.size() + v.size() + r.size() + 2);
  key.append(k).append("|").append(v).append("|").append(r);
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto& c = family.Add({{"task", task},
                          {kindLabel, std::string(k)},
                          {"verdict", std::string(v)},
                          {"reason", std::string(r)}});
    it = cache.emplace(std::move(key), &c).first;
  }
  return *it->second;
}

prometheus::Histogram& histogram(std::map<std::string, prometheus::Histogram*, std::less<>>& cache,
                                 prometheus::Family<prometheus::Histogram>& family,
                                 const std::string& task, prometheus::Labels labels,
                                 std::string key,
                                 const prometheus::Histogram::BucketBoundaries& buckets) {
  auto it = cache.find(key);
  if (it == cache.end()) {
    labels.emplace("task", task);
    it = cache.emplace(std::move(key), &family.Add(labels, buckets)).first;
  }
  return *it->second;
}

}  // namespace

void TaskMetrics::request(std::string_view kind, std::string_view verdict, std::string_view reason,
                          std::optional<double> seconds) {
  std::lock_guard lock(mu_);
  std::string_view k = admitLabel(kinds_, kind, kMaxKinds);
  std::string_view v = admitLabel(verdicts_, verdict, kMaxVerdicts);
  std::string_view r = admitLabel(reasons_, reason, kMaxReasons);
  outcomeCounter(requests_, *families_->requests, name_, "kind", k, v, r).Increment();
  if (!seconds) return;
  std::string key;
  key.append(k).append("|").append(v);
  histogram(latency_, *families_->latency, name_,
            {{"kind", std::string(k)}, {"verdict", std::string(v)}}, std::move(key),
            kLatencyBuckets)
      .Observe(*seconds > 0 ? *seconds : 0);
}

void TaskMetrics::tunnelEnded(std::string_view mode, std::string_view verdict,
                              std::string_view reason, double seconds) {
  // Three modes, so the mode needs no admission of its own; verdicts and reasons share the
  // task's caps with requests.
  const std::string_view m = mode == "intercepted" ? "intercepted"
                             : mode == "websocket" ? "websocket"
                                                   : "spliced";
  std::lock_guard lock(mu_);
  std::string_view v = admitLabel(verdicts_, verdict, kMaxVerdicts);
  std::string_view r = admitLabel(reasons_, reason, kMaxReasons);
  outcomeCounter(tunnelEnds_, *families_->tunnelEnds, name_, "mode", m, v, r).Increment();
  histogram(lifetime_, *families_->lifetime, name_, {{"mode", std::string(m)}}, std::string(m),
            kLifetimeBuckets)
      .Observe(seconds > 0 ? seconds : 0);
}

void TaskMetrics::connectionOpened() { active_->Increment(); }
void TaskMetrics::connectionClosed() { active_->Decrement(); }
void TaskMetrics::tunnelOpened() { tunnels_->Increment(); }
void TaskMetrics::tunnelClosed() { tunnels_->Decrement(); }
void TaskMetrics::bytesUp(uint64_t n) { bytesUp_->Increment(static_cast<double>(n)); }
void TaskMetrics::bytesDown(uint64_t n) { bytesDown_->Increment(static_cast<double>(n)); }

void TaskMetrics::removeSeries() {
  std::lock_guard lock(mu_);
  families_->active->Remove(active_);
  families_->tunnels->Remove(tunnels_);
  families_->bytes->Remove(bytesUp_);
  families_->bytes->Remove(bytesDown_);
  for (auto& [key, counter] : requests_) families_->requests->Remove(counter);
  requests_.clear();
  for (auto& [key, counter] : tunnelEnds_) families_->tunnelEnds->Remove(counter);
  tunnelEnds_.clear();
  for (auto& [key, h] : latency_) families_->latency->Remove(h);
  latency_.clear();
  for (auto& [key, h] : lifetime_) families_->lifetime->Remove(h);
  lifetime_.clear();
  families_->intercepted->Remove(intercepted_);
  for (auto& [key, counter] : broker_) {
    (key[0] == 'i'   ? families_->injections
     : key[0] == 'g' ? families_->gitRefs
     : key[0] == 'f' ? families_->budgetFailOpen
                     : families_->scrubs)
        ->Remove(counter);
  }
  broker_.clear();
  removeLlmSeries();
  removeSshSeries();
}

struct Metrics::State {
  std::chrono::seconds ttl;
  std::shared_ptr<const TaskMetrics::Families> families;
  prometheus::Counter* reloadOk;
  prometheus::Counter* reloadError;
  prometheus::Gauge* lastReloadOk;
  prometheus::Gauge* lastReloadOkTime;
  prometheus::Counter* leafHits;
  prometheus::Counter* leafMisses;
  std::atomic<uint64_t> leafHitsSeen{0}, leafMissesSeen{0};
  prometheus::Family<prometheus::Histogram>* connect;
  prometheus::Family<prometheus::Histogram>* parentConnect;
  prometheus::Family<prometheus::Counter>* parentFailures;
  // Parent names are config keys, but reloads can bring new ones: kMaxParents series at most,
  // then "other" (under mu).
  std::set<std::string, std::less<>> parents;
  prometheus::Gauge* unwatched;
  prometheus::Family<prometheus::Gauge>* configInfo;
  prometheus::Gauge* configInfoSeries = nullptr;  // under mu

  struct Entry {
    std::shared_ptr<TaskMetrics> core;  // owns the handles
    std::weak_ptr<TaskMetrics> handle;  // what callers share; expires with the last holder
    uint64_t generation = 0;            // which handle `released` refers to
    bool released = false;              // the last holder of handle `generation` is gone
    std::optional<std::chrono::steady_clock::time_point> idleSince;
  };
  mutable std::mutex mu;
  std::unordered_map<std::string, Entry> tasks;
};

Metrics::Metrics(std::chrono::seconds taskSeriesTtl) : state_(std::make_shared<State>()) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto families = std::make_shared<TaskMetrics::Families>();
  families->registry = registry;
  families->requests = &prometheus::BuildCounter()
                            .Name("sandgate_requests_total")
                            .Help("Requests, tunnels and refusals by task, kind, verdict, reason")
                            .Register(*registry);
  families->active = &prometheus::BuildGauge()
                          .Name("sandgate_connections_active")
                          .Help("Client connections currently open, by task (on this replica)")
                          .Register(*registry);
  families->tunnels = &prometheus::BuildGauge()
                           .Name("sandgate_tunnels_active")
                           .Help(
                               "CONNECT tunnels (plain or intercepted) currently open, by task "
                               "(on this replica)")
                           .Register(*registry);
  families->bytes = &prometheus::BuildCounter()
                         .Name("sandgate_bytes_total")
                         .Help("Payload bytes relayed, by task and direction (up: to upstream)")
                         .Register(*registry);
  families->latency = &prometheus::BuildHistogram()
                           .Name("sandgate_request_duration_seconds")
                           .Help(
                               "Latency of requests (forwarded, intercepted, refused), from the "
                               "first byte of the head to the last byte of the answer, by task, "
                               "kind and verdict")
                           .Register(*registry);
  families->tunnelEnds = &prometheus::BuildCounter()
                              .Name("sandgate_tunnels_total")
                              .Help(
                                  "Tunnels and WebSockets that were established and have ended, "
                                  "by task, mode (spliced, intercepted, websocket), verdict and "
                                  "reason")
                              .Register(*registry);
  families->lifetime =
      &prometheus::BuildHistogram()
           .Name("sandgate_tunnel_duration_seconds")
           .Help("Lifetime of established tunnels and WebSockets, by task and mode")
           .Register(*registry);
  families->injections =
      &prometheus::BuildCounter()
           .Name("sandgate_credential_injections_total")
           .Help(
               "Secrets sent upstream (result ok) or refused, by task, credential, "
               "result and how (injected, placeholder)")
           .Register(*registry);
  families->budgetFailOpen = &prometheus::BuildCounter()
                                  .Name("sandgate_budget_fail_open_total")
                                  .Help(
                                      "Requests admitted without being counted because the "
                                      "shared budget counters (state.redis, fail: open) could "
                                      "not answer, by task")
                                  .Register(*registry);
  families->gitRefs = &prometheus::BuildCounter()
                           .Name("sandgate_git_push_refs_total")
                           .Help(
                               "Refs named by git pushes under a rule's git block, by task and "
                               "verdict (allowed, or the git_* reason)")
                           .Register(*registry);
  TaskMetrics::registerSshFamilies(*families);
  families->scrubs = &prometheus::BuildCounter()
                          .Name("sandgate_secret_scrubs_total")
                          .Help("Secrets replaced in upstream responses, by task and credential")
                          .Register(*registry);
  families->intercepted = &prometheus::BuildCounter()
                               .Name("sandgate_tls_intercepted_total")
                               .Help("CONNECTs whose TLS sandgate terminated, by task")
                               .Register(*registry);
  families->leafCache = &prometheus::BuildCounter()
                             .Name("sandgate_leaf_cache_lookups_total")
                             .Help("Leaf certificate cache lookups, by result (hit, miss)")
                             .Register(*registry);
  state_->leafHits = &families->leafCache->Add({{"result", "hit"}});
  state_->leafMisses = &families->leafCache->Add({{"result", "miss"}});
  state_->unwatched = &prometheus::BuildGauge()
                           .Name("sandgate_credential_files_unwatched")
                           .Help(
                               "File credential sources whose changes inotify cannot watch now "
                               "(each is checked with stat(2) on every request instead)")
                           .Register(*registry)
                           .Add({});
  auto& reloads = prometheus::BuildCounter()
                      .Name("sandgate_config_reloads_total")
                      .Help("Configuration reloads by result (ok, error)")
                      .Register(*registry);
  state_->reloadOk = &reloads.Add({{"result", "ok"}});
  state_->reloadError = &reloads.Add({{"result", "error"}});
  state_->lastReloadOk = &prometheus::BuildGauge()
                              .Name("sandgate_config_last_reload_successful")
                              .Help(
                                  "1 while the configuration in use is the newest one seen; 0 "
                                  "from a refused reload until one succeeds")
                              .Register(*registry)
                              .Add({});
  state_->lastReloadOkTime =
      &prometheus::BuildGauge()
           .Name("sandgate_config_last_reload_success_timestamp_seconds")
           .Help("Unix time of the last successful load or reload of the configuration")
           .Register(*registry)
           .Add({});
  state_->connect = &prometheus::BuildHistogram()
                         .Name("sandgate_upstream_connect_seconds")
                         .Help(
                             "Time to establish upstream connections, by parent proxy "
                             "(direct: none); through a parent, until its tunnel is open")
                         .Register(*registry);
  state_->parentConnect = &prometheus::BuildHistogram()
                               .Name("sandgate_parent_connect_seconds")
                               .Help("Time to connect to a parent proxy (TCP only), by parent")
                               .Register(*registry);
  state_->parentFailures =
      &prometheus::BuildCounter()
           .Name("sandgate_parent_failures_total")
           .Help("Failed attempts through a parent proxy, by parent and reason")
           .Register(*registry);
  state_->connect->Add({{"parent", "direct"}}, kConnectBuckets);
  state_->configInfo = &prometheus::BuildGauge()
                            .Name("sandgate_config_info")
                            .Help(
                                "Always 1; the sha256 label is the digest of the config file "
                                "in use (replicas that differ run different configs)")
                            .Register(*registry);
  prometheus::BuildGauge()
      .Name("sandgate_build_info")
      .Help("Always 1; the version label says which sandgate is running")
      .Register(*registry)
      .Add({{"version", SANDGATE_VERSION}})
      .Set(1);
  families->llm = std::make_shared<LlmFamilies>(*registry);
  state_->ttl = taskSeriesTtl;
  state_->families = std::move(families);
}

Metrics::~Metrics() = default;

std::shared_ptr<TaskMetrics> Metrics::task(const std::string& name) {
  std::lock_guard lock(state_->mu);
  auto& e = state_->tasks[name];
  if (!e.core) e.core.reset(new TaskMetrics(state_->families, name));
  if (auto h = e.handle.lock()) return h;
  // A fresh sharing group whose deleter tells us when its last holder is gone. It keeps the
  // core alive itself, so a holder that outlives this Metrics stays valid.
  const uint64_t gen = ++e.generation;
  e.released = false;
  e.idleSince.reset();
  std::weak_ptr<State> weak = state_;
  std::shared_ptr<TaskMetrics> h(e.core.get(), [weak, core = e.core, name, gen](TaskMetrics*) {
    if (auto s = weak.lock()) {
      std::lock_guard lock(s->mu);
      auto it = s->tasks.find(name);
      if (it != s->tasks.end() && it->second.generation == gen) it->second.released = true;
    }
  });
  e.handle = h;
  return h;
}

void Metrics::sweep(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(state_->mu);
  for (auto it = state_->tasks.begin(); it != state_->tasks.end();) {
    auto& e = it->second;
    if (e.released) {
      if (!e.idleSince) e.idleSince = now;
      if (now - *e.idleSince >= state_->ttl) {
        e.core->removeSeries();
        it = state_->tasks.erase(it);
        continue;
      }
    }
    ++it;
  }
}

size_t Metrics::taskCount() const {
  std::lock_guard lock(state_->mu);
  return state_->tasks.size();
}

void Metrics::configInfo(const std::string& sha256) {
  std::lock_guard lock(state_->mu);
  // The new digest is set before the old one goes: a scrape during a reload sees the old
  // series, both for an instant, or the new one, never none (which would look like a replica
  // without a config). The same digest again is the same series, kept.
  prometheus::Gauge* next = &state_->configInfo->Add({{"sha256", sha256}});
  next->Set(1);
  if (state_->configInfoSeries && state_->configInfoSeries != next) {
    state_->configInfo->Remove(state_->configInfoSeries);
  }
  state_->configInfoSeries = next;
}

void Metrics::configLoaded() {
  state_->lastReloadOk->Set(1);
  state_->lastReloadOkTime->Set(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void Metrics::configReload(bool ok) {
  (ok ? state_->reloadOk : state_->reloadError)->Increment();
  if (ok) {
    configLoaded();
  } else {
    state_->lastReloadOk->Set(0);
  }
}

namespace {
// Advances `counter` to the running total `now` (callers on several threads report totals in
// any order: only the part above the highest total seen is added).
void advanceTo(prometheus::Counter* counter, std::atomic<uint64_t>& seen, uint64_t now) {
  uint64_t before = seen.load(std::memory_order_relaxed);
  while (now > before) {
    if (seen.compare_exchange_weak(before, now, std::memory_order_relaxed)) {
      counter->Increment(static_cast<double>(now - before));
      return;
    }
  }
}
}  // namespace

void Metrics::leafCache(uint64_t hits, uint64_t misses) {
  advanceTo(state_->leafHits, state_->leafHitsSeen, hits);
  advanceTo(state_->leafMisses, state_->leafMissesSeen, misses);
}

void Metrics::unwatchedCredentialFiles(size_t n) { state_->unwatched->Set(static_cast<double>(n)); }

namespace {
constexpr size_t kMaxParents = 32;
}  // namespace

std::string Metrics::parentLabel(std::string_view parent) {
  std::lock_guard lock(state_->mu);
  if (state_->parents.contains(parent)) return std::string(parent);
  if (state_->parents.size() >= kMaxParents) return std::string(kOther);
  return *state_->parents.emplace(parent).first;
}

void Metrics::upstreamConnectSeconds(double s, std::string_view parent) {
  const std::string label = parent.empty() ? std::string("direct") : parentLabel(parent);
  state_->connect->Add({{"parent", label}}, kConnectBuckets).Observe(s > 0 ? s : 0);
}

void Metrics::parentConnectSeconds(std::string_view parent, double s) {
  state_->parentConnect->Add({{"parent", parentLabel(parent)}}, kConnectBuckets)
      .Observe(s > 0 ? s : 0);
}

void Metrics::parentFailure(std::string_view parent, std::string_view reason) {
  const std::string r = isMetricToken(reason) ? std::string(reason) : std::string(kOther);
  state_->parentFailures->Add({{"parent", parentLabel(parent)}, {"reason", r}}).Increment();
}

void Metrics::llmModels(std::set<std::string, std::less<>> models) {
  state_->families->llm->setModels(std::move(models));
}

void Metrics::budgetSource(std::function<std::vector<BudgetGauge>()> source) {
  state_->families->llm->setBudgetSource(std::move(source));
}

std::string Metrics::render() {
  state_->families->llm->refreshBudgets();
  auto families = state_->families->registry->Collect();
  appendProcessMetrics(families);
  return prometheus::TextSerializer().Serialize(families);
}

std::shared_ptr<prometheus::Registry> Metrics::registry() const {
  return state_->families->registry;
}

}  // namespace sandgate::proxy
