// Prometheus metrics of the proxy: families, per-task handles, cardinality guards, sweeping.
#include "proxy/observe/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <optional>
#include <unordered_map>

#ifndef SANDGATE_VERSION
#define SANDGATE_VERSION "unknown"
#endif

namespace sandgate::proxy {
namespace {

constexpr std::string_view kOther = "other";

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

// Request durations span sub-millisecond refusals to hour-long tunnels.
const prometheus::Histogram::BucketBoundaries kDurationBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600};
const prometheus::Histogram::BucketBoundaries kConnectBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

bool isToken(std::string_view v) {
  if (v.empty() || v.size() > TaskMetrics::kMaxTokenBytes) return false;
  for (char c : v) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// The label value to use for `v`: itself when it is a token already seen or when there is
// room for one more distinct value, else "other". Bounds the series per task no matter what
// a caller passes.
std::string_view admit(std::set<std::string, std::less<>>& seen, std::string_view v, size_t cap) {
  if (!isToken(v)) return kOther;
  if (auto it = seen.find(v); it != seen.end()) return *it;
  if (seen.size() >= cap) return kOther;
  return *seen.emplace(v).first;
}

}  // namespace

struct TaskMetrics::Families {
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Gauge>* active;
  prometheus::Family<prometheus::Gauge>* tunnels;
  prometheus::Family<prometheus::Counter>* bytes;
  prometheus::Family<prometheus::Histogram>* duration;
  prometheus::Family<prometheus::Counter>* injections;
  prometheus::Family<prometheus::Counter>* scrubs;
  prometheus::Family<prometheus::Counter>* intercepted;
  prometheus::Family<prometheus::Gauge>* leafCache;
  prometheus::Family<prometheus::Counter>* gitRefs;
};

TaskMetrics::TaskMetrics(std::shared_ptr<const Families> families, std::string name)
    : families_(std::move(families)), name_(std::move(name)) {
  active_ = &families_->active->Add({{"task", name_}});
  tunnels_ = &families_->tunnels->Add({{"task", name_}});
  bytesUp_ = &families_->bytes->Add({{"task", name_}, {"direction", "up"}});
  bytesDown_ = &families_->bytes->Add({{"task", name_}, {"direction", "down"}});
  duration_ = &families_->duration->Add({{"task", name_}}, kDurationBuckets);
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
  const std::string_view r = isToken(reason) ? reason : kOther;
  std::string key = brokerKey('g', {}, r);
  auto it = broker_.find(key);
  if (it == broker_.end()) {
    auto& c = families_->gitRefs->Add({{"task", name_}, {"reason", std::string(r)}});
    it = broker_.emplace(std::move(key), &c).first;
  }
  it->second->Increment(static_cast<double>(n));
}

void TaskMetrics::tlsIntercepted() { intercepted_->Increment(); }

TaskMetrics::~TaskMetrics() = default;

void TaskMetrics::request(std::string_view kind, std::string_view verdict,
                          std::string_view reason) {
  std::lock_guard lock(mu_);
  std::string_view k = admit(kinds_, kind, kMaxKinds);
  std::string_view v = admit(verdicts_, verdict, kMaxVerdicts);
  std::string_view r = admit(reasons_, reason, kMaxReasons);
  std::string key;
  key.reserve(k.size() + v.size() + r.size() + 2);
  key.append(k).append("|").append(v).append("|").append(r);
  auto it = requests_.find(key);
  if (it == requests_.end()) {
    auto& c = families_->requests->Add({{"task", name_},
                                        {"kind", std::string(k)},
                                        {"verdict", std::string(v)},
                                        {"reason", std::string(r)}});
    it = requests_.emplace(std::move(key), &c).first;
  }
  it->second->Increment();
}

void TaskMetrics::connectionOpened() { active_->Increment(); }
void TaskMetrics::connectionClosed() { active_->Decrement(); }
void TaskMetrics::tunnelOpened() { tunnels_->Increment(); }
void TaskMetrics::tunnelClosed() { tunnels_->Decrement(); }
void TaskMetrics::bytesUp(uint64_t n) { bytesUp_->Increment(static_cast<double>(n)); }
void TaskMetrics::bytesDown(uint64_t n) { bytesDown_->Increment(static_cast<double>(n)); }
void TaskMetrics::requestDuration(double seconds) { duration_->Observe(seconds > 0 ? seconds : 0); }

void TaskMetrics::removeSeries() {
  std::lock_guard lock(mu_);
  families_->active->Remove(active_);
  families_->tunnels->Remove(tunnels_);
  families_->bytes->Remove(bytesUp_);
  families_->bytes->Remove(bytesDown_);
  families_->duration->Remove(duration_);
  for (auto& [key, counter] : requests_) families_->requests->Remove(counter);
  requests_.clear();
  families_->intercepted->Remove(intercepted_);
  for (auto& [key, counter] : broker_) {
    (key[0] == 'i'   ? families_->injections
     : key[0] == 'g' ? families_->gitRefs
                     : families_->scrubs)
        ->Remove(counter);
  }
  broker_.clear();
}

struct Metrics::State {
  std::chrono::seconds ttl;
  std::shared_ptr<const TaskMetrics::Families> families;
  prometheus::Counter* reloadOk;
  prometheus::Counter* reloadError;
  prometheus::Histogram* connect;
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
  families->duration = &prometheus::BuildHistogram()
                            .Name("sandgate_request_duration_seconds")
                            .Help("Duration of requests and tunnels, by task")
                            .Register(*registry);
  families->injections =
      &prometheus::BuildCounter()
           .Name("sandgate_credential_injections_total")
           .Help(
               "Secrets sent upstream (result ok) or refused, by task, credential, "
               "result and how (injected, placeholder)")
           .Register(*registry);
  families->gitRefs = &prometheus::BuildCounter()
                           .Name("sandgate_git_push_refs_total")
                           .Help(
                               "Refs named by git pushes under a rule's git block, by task and "
                               "verdict (allowed, or the git_* reason)")
                           .Register(*registry);
  families->scrubs = &prometheus::BuildCounter()
                          .Name("sandgate_secret_scrubs_total")
                          .Help("Secrets replaced in upstream responses, by task and credential")
                          .Register(*registry);
  families->intercepted = &prometheus::BuildCounter()
                               .Name("sandgate_tls_intercepted_total")
                               .Help("CONNECTs whose TLS sandgate terminated, by task")
                               .Register(*registry);
  families->leafCache = &prometheus::BuildGauge()
                             .Name("sandgate_leaf_cache_lookups")
                             .Help("Leaf certificate cache lookups so far, by result (hit, miss)")
                             .Register(*registry);
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
  state_->connect = &prometheus::BuildHistogram()
                         .Name("sandgate_upstream_connect_seconds")
                         .Help("Time to establish upstream TCP connections")
                         .Register(*registry)
                         .Add({}, kConnectBuckets);
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
  // One series at a time: the old digest goes away as the new one appears.
  if (state_->configInfoSeries) state_->configInfo->Remove(state_->configInfoSeries);
  state_->configInfoSeries = &state_->configInfo->Add({{"sha256", sha256}});
  state_->configInfoSeries->Set(1);
}

void Metrics::configReload(bool ok) { (ok ? state_->reloadOk : state_->reloadError)->Increment(); }

void Metrics::leafCache(uint64_t hits, uint64_t misses) {
  auto* f = state_->families->leafCache;
  f->Add({{"result", "hit"}}).Set(static_cast<double>(hits));
  f->Add({{"result", "miss"}}).Set(static_cast<double>(misses));
}

void Metrics::unwatchedCredentialFiles(size_t n) { state_->unwatched->Set(static_cast<double>(n)); }

void Metrics::upstreamConnectSeconds(double s) { state_->connect->Observe(s > 0 ? s : 0); }

std::string Metrics::render() {
  return prometheus::TextSerializer().Serialize(state_->families->registry->Collect());
}

std::shared_ptr<prometheus::Registry> Metrics::registry() const {
  return state_->families->registry;
}

}  // namespace sandgate::proxy
