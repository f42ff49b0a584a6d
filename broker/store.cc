// SecretStore: per-snapshot secrets, file re-checks on fetch, background exec refresh.
#include "broker/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace sandgate::broker {

using Clock = std::chrono::steady_clock;
using Kind = config::CredentialSource::Kind;

namespace {

struct Entry {
  std::string name;
  Kind kind = Kind::kFile;
  std::unique_ptr<FileSource> file;  // kFile
  std::vector<std::string> argv;     // kExec
  Clock::duration ttl{};             // kExec
  // An ssh credential's OpenSSH private key (issue #42): several lines, kept as read; it is
  // never put into a header, so the header-safety check of its bytes does not apply.
  bool multiLine = false;

  // env and exec values; file sources keep their own.
  mutable std::mutex mu;
  std::shared_ptr<const Secret> value;
  std::string error;
  Clock::time_point expires = Clock::time_point::max();

  // kExec scheduling: touched only by open() and then the refresher thread.
  Clock::time_point nextRun{};
  std::chrono::milliseconds backoff{};

  // kGithubApp: one token per set of repositories (keyed by scopeKey), and which set each
  // task that narrows it uses (other tasks use the source's own, under key fullScope).
  std::shared_ptr<GithubAppMinter> minter;
  std::map<std::string, std::unique_ptr<TokenCache>, std::less<>> scopes;
  std::map<std::string, std::string, std::less<>> taskScope;
  std::string fullScope;

  TokenCache* cacheFor(std::string_view task) const {
    auto t = taskScope.find(task);
    auto it = scopes.find(t == taskScope.end() ? std::string_view(fullScope)
                                               : std::string_view(t->second));
    return it == scopes.end() ? nullptr : it->second.get();
  }
};

// A set of repositories as one key: lower-cased (GitHub compares names so), sorted, unique.
std::string scopeKey(const std::vector<config::Located<std::string>>& repos) {
  std::vector<std::string> names;
  for (const auto& r : repos) {
    std::string n = r.value;
    std::transform(n.begin(), n.end(), n.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string key;
  for (const auto& n : names) key += (key.empty() ? "" : ",") + n;
  return key;
}

// The names as the token request lists them: as written, each once.
std::vector<std::string> requested(const std::vector<config::Located<std::string>>& repos) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& r : repos) {
    std::string lower = r.value;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (seen.insert(lower).second) out.push_back(r.value);
  }
  return out;
}

}  // namespace

struct SecretStore::Impl {
  StoreOptions options;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries;
  std::atomic<uint64_t> refreshes{0};
  std::atomic<uint64_t> refreshFailures{0};
  std::mutex mu;  // for cv only
  std::condition_variable_any cv;
  bool anyExec = false;
  std::mutex startMu;      // guards the start of the refresher
  std::jthread refresher;  // declared last: stopped and joined before the entries go

  Clock::duration refreshDelay(const Entry& e) const {
    auto d = std::chrono::duration_cast<Clock::duration>(e.ttl * options.refreshFraction);
    // A zero or tiny ttl must not turn the refresher into a busy loop.
    return std::max<Clock::duration>(d, std::chrono::milliseconds(10));
  }

  // Runs one exec credential's command and records the outcome (refresher thread, or open()).
  bool runOnce(Entry& e, std::stop_token stop) {
    std::shared_ptr<const Secret> previous;
    {
      std::lock_guard lock(e.mu);
      previous = e.value;
    }
    ExecLimits limits = options.exec;
    limits.multiLine = limits.multiLine || e.multiLine;
    Fetched f = runExec(e.argv, limits, stop, previous.get());
    auto now = Clock::now();
    if (f.ok()) {
      {
        std::lock_guard lock(e.mu);
        e.value = std::move(f.secret);  // the old Secret is wiped when its last user drops it
        e.error.clear();
        e.expires = now + e.ttl;
      }
      e.nextRun = now + refreshDelay(e);
      e.backoff = options.minBackoff;
      return true;
    }
    {
      // Keep the current value until it expires: a failed refresh is not yet an outage.
      std::lock_guard lock(e.mu);
      e.error = std::move(f.error);
    }
    e.nextRun = now + e.backoff;
    e.backoff = std::min(e.backoff * 2, options.maxBackoff);
    return false;
  }

  void refreshLoop(std::stop_token stop) {
    std::unique_lock lock(mu);
    while (!stop.stop_requested()) {
      auto next = Clock::time_point::max();
      for (auto& [name, e] : entries) {
        if (e->kind == Kind::kExec) next = std::min(next, e->nextRun);
        for (auto& [key, cache] : e->scopes) next = std::min(next, cache->refreshAt());
      }
      cv.wait_until(lock, stop, next, [] { return false; });
      if (stop.stop_requested()) break;
      auto now = Clock::now();
      for (auto& [name, e] : entries) {
        if (e->kind == Kind::kExec && e->nextRun <= now) {
          lock.unlock();
          bool ok = runOnce(*e, stop);
          if (!stop.stop_requested()) (ok ? refreshes : refreshFailures)++;
          lock.lock();
        }
        for (auto& [key, cache] : e->scopes) {
          if (cache->refreshAt() > now) continue;
          // Before the token expires: requests keep the current one while this runs, and
          // one that finds it expired joins this mint instead of starting its own.
          lock.unlock();
          Fetched f = cache->refresh(stop);
          if (!stop.stop_requested()) (f.ok() ? refreshes : refreshFailures)++;
          if (!f.ok() && !stop.stop_requested()) {
            // The token in use still serves until it expires; say so before it does.
            spdlog::warn(
                "credential {}: renewing the GitHub App token failed (retrying with "
                "back-off): {}",
                name, f.error);
          }
          lock.lock();
        }
      }
    }
  }
};

SecretStore::SecretStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SecretStore::~SecretStore() {
  if (impl_->refresher.joinable()) {
    impl_->refresher.request_stop();
    impl_->refresher.join();
  }
}

Result<std::shared_ptr<const SecretStore>> SecretStore::open(
    const config::Credentials& credentials, const std::string& configFile, StoreOptions options,
    const std::vector<config::Task>& tasks) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Diagnostics errors;
  bool anyExec = false;
  for (const auto& [name, cred] : credentials) {
    auto e = std::make_unique<Entry>();
    e->name = name;
    e->kind = cred.source.kind;
    e->multiLine = cred.ssh.has_value();
    std::string error;
    switch (cred.source.kind) {
      case Kind::kFile: {
        e->file = std::make_unique<FileSource>(cred.source.file, e->multiLine);
        Fetched f = e->file->get();
        error = f.error;
        break;
      }
      case Kind::kEnv: {
        Fetched f = readEnv(cred.source.env, e->multiLine);
        e->value = std::move(f.secret);
        e->error = error = f.error;
        break;
      }
      case Kind::kExec: {
        anyExec = true;
        e->argv = cred.source.exec;
        e->ttl = std::chrono::duration_cast<Clock::duration>(cred.source.ttl);
        e->backoff = options.minBackoff;
        impl->runOnce(*e, {});
        std::lock_guard lock(e->mu);
        error = e->error;
        break;
      }
      case Kind::kGithubApp: {
        if (!cred.source.githubApp) {
          error = "the github_app source is incomplete";
          break;
        }
        if (!options.api) {
          error = "no API client to mint GitHub App tokens with";
          break;
        }
        anyExec = true;  // the refresher renews the tokens
        const auto& app = cred.source.githubApp;
        e->minter = std::make_shared<GithubAppMinter>(name, app, options.api, options.exec,
                                                      options.apiTimeout);
        auto addScope = [&](const std::vector<config::Located<std::string>>& repos) {
          std::string key = scopeKey(repos);
          if (!e->scopes.contains(key)) {
            auto mint = [minter = e->minter, names = requested(repos)](std::stop_token stop) {
              return minter->mint(names, stop);
            };
            e->scopes.emplace(key, std::make_unique<TokenCache>(mint, options.tokens));
          }
          return key;
        };
        e->fullScope = addScope(app->repositories);
        for (const auto& t : tasks) {
          auto it = t.repositories.find(name);
          if (it != t.repositories.end()) e->taskScope[t.name] = addScope(it->second);
        }
        // Every token is minted now, as an exec secret is run: a source that cannot mint is
        // a start-up error, and requests never wait for a first token.
        for (auto& [key, cache] : e->scopes) {
          Fetched f = cache->refresh();
          if (!f.ok() && error.empty()) {
            error = key == e->fullScope
                        ? f.error
                        : fmt::format("the token for repositories {}: {}", key, f.error);
          }
        }
        break;
      }
    }
    if (!error.empty() && !cred.optional) {
      errors.push_back(Diagnostic{configFile, cred.source.mark.line, cred.source.mark.col,
                                  fmt::format("credentials.{}.source", name),
                                  fmt::format("cannot load credential `{}`: {} (mark it "
                                              "`optional: true` to start without it)",
                                              name, error)});
    }
    impl->entries.emplace(name, std::move(e));
  }
  if (!errors.empty()) return errors;
  impl->anyExec = anyExec;
  auto store = std::shared_ptr<const SecretStore>(new SecretStore(std::move(impl)));
  if (options.startRefresh) store->startRefresh();
  return store;
}

void SecretStore::startRefresh() const {
  Impl& im = *impl_;
  std::lock_guard lock(im.startMu);
  if (!im.anyExec || im.refresher.joinable()) return;
  im.refresher = std::jthread([raw = &im](std::stop_token stop) { raw->refreshLoop(stop); });
}

namespace {

Fetch minted(const Entry& e, std::string_view task, bool mayMint) {
  TokenCache* cache = e.cacheFor(task);
  if (!cache) {
    return {nullptr, reason::kCredentialUnavailable,
            fmt::format("credential `{}`: no token for this task", e.name)};
  }
  Fetched f = mayMint ? cache->get() : cache->current();
  if (f.ok()) return {std::move(f.secret), {}, {}};
  return {nullptr, reason::kCredentialUnavailable,
          fmt::format("credential `{}`: cannot mint a GitHub App installation token: {}", e.name,
                      f.error)};
}

}  // namespace

Fetch SecretStore::current(std::string_view credential, std::string_view task) const {
  auto it = impl_->entries.find(credential);
  if (it != impl_->entries.end() && it->second->kind == Kind::kGithubApp) {
    return minted(*it->second, task, false);
  }
  return get(credential, task);
}

Fetch SecretStore::get(std::string_view credential, std::string_view task) const {
  auto it = impl_->entries.find(credential);
  if (it == impl_->entries.end()) {
    return {nullptr, reason::kCredentialUnavailable,
            fmt::format("no credential named `{}` in this configuration", credential)};
  }
  Entry& e = *it->second;
  if (e.kind == Kind::kGithubApp) return minted(e, task, true);
  if (e.kind == Kind::kFile) {
    Fetched f = e.file->get();
    if (f.ok()) return {std::move(f.secret), {}, {}};
    return {nullptr, reason::kCredentialUnavailable,
            fmt::format("credential `{}`: {}", e.name, f.error)};
  }
  std::lock_guard lock(e.mu);
  if (e.value && Clock::now() < e.expires) return {e.value, {}, {}};
  if (e.value) {
    return {nullptr, reason::kCredentialUnavailable,
            fmt::format("credential `{}`: expired and not refreshed: {}", e.name,
                        e.error.empty() ? "refresh pending" : e.error)};
  }
  return {nullptr, reason::kCredentialUnavailable,
          fmt::format("credential `{}`: {}", e.name, e.error)};
}

uint64_t SecretStore::refreshes() const { return impl_->refreshes.load(); }
uint64_t SecretStore::refreshFailures() const { return impl_->refreshFailures.load(); }

}  // namespace sandgate::broker
