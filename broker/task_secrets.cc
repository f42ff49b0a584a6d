// The secrets of a task as scrub forms, kept current with the store (see task_secrets.h).
#include "broker/task_secrets.h"

#include <algorithm>

#include "broker/store.h"
#include "common/encoding.h"

namespace sandgate::broker {

ScrubRule scrubRuleFor(const SecretForm& form, const PlaceholderSet* placeholders) {
  const Placeholder* p = placeholders ? placeholders->forCredential(form.credential) : nullptr;
  std::string replacement;
  if (!p) {
    replacement = redactionMarker(form.credential);
  } else if (form.basicUser) {
    replacement = base64Encode(*form.basicUser + ":" + p->value);
  } else {
    replacement = p->value;
  }
  return ScrubRule{form.bytes, std::move(replacement), form.credential};
}

std::vector<SecretForm> secretForms(const config::Credential& c,
                                    std::shared_ptr<const Secret> secret) {
  std::vector<SecretForm> out;
  if (!c.scrub || !secret || secret->empty()) return out;
  // Every Basic user name the secret goes out with (per host, or the one `inject`).
  std::vector<std::string> users;
  auto addUser = [&](const config::Injection& inj) {
    if (inj.kind == config::Injection::Kind::kBasic &&
        std::find(users.begin(), users.end(), inj.username) == users.end()) {
      users.push_back(inj.username);
    }
  };
  if (c.injectPerHost.empty()) addUser(c.inject);
  for (const auto& h : c.injectPerHost) addUser(h.inject);
  out.push_back({c.name, secret, std::nullopt});
  for (const auto& user : users) {
    // reveal(): the Basic token is made from it to be found (and replaced) in responses; the
    // pair and its encoding are wiped, the token kept only in protected memory.
    std::string pair = user + ":" + std::string(secret->reveal());
    std::string token = base64Encode(pair);
    wipe(pair);
    out.push_back({c.name, Secret::take(token), user});
  }
  return out;
}

TaskSecrets::TaskSecrets(std::shared_ptr<const SecretStore> store,
                         const config::Credentials& credentials,
                         const std::vector<std::string>& names, std::string task)
    : store_(std::move(store)), task_(std::move(task)) {
  for (const auto& name : names) {
    auto it = credentials.find(name);
    if (it == credentials.end() || !it->second.scrub) continue;
    config::Credential c;
    c.name = it->second.name;
    c.inject = it->second.inject;
    c.injectPerHost = it->second.injectPerHost;
    c.scrub = true;
    credentials_.push_back(std::move(c));
  }
}

std::shared_ptr<const std::vector<SecretForm>> TaskSecrets::current() const {
  std::vector<std::shared_ptr<const Secret>> now;
  now.reserve(credentials_.size());
  // current(): what the task can have sent; a token not minted yet was never sent.
  for (const auto& c : credentials_) {
    now.push_back(store_ ? store_->current(c.name, task_).secret : nullptr);
  }
  std::lock_guard lock(mu_);
  if (cached_ && now == sources_) return cached_;
  auto forms = std::make_shared<std::vector<SecretForm>>();
  for (size_t i = 0; i < credentials_.size(); ++i) {
    for (auto& f : secretForms(credentials_[i], now[i])) forms->push_back(std::move(f));
  }
  sources_ = std::move(now);
  cached_ = std::move(forms);
  return cached_;
}

std::shared_ptr<const ScrubSet> TaskSecrets::compiledFor(
    const std::shared_ptr<const std::vector<SecretForm>>& forms,
    const std::shared_ptr<const PlaceholderSet>& shown) const {
  std::lock_guard lock(compiledMu_);
  for (const auto& e : compiled_) {
    if (e.forms == forms && e.shown == shown) return e.set;
  }
  std::vector<ScrubRule> rules;
  if (forms) {
    for (const auto& form : *forms) addScrubRule(rules, scrubRuleFor(form, shown.get()));
  }
  auto set = std::make_shared<const ScrubSet>(std::move(rules));
  // Sets of forms a rotation replaced serve no new connection: dropped first.
  std::erase_if(compiled_, [&](const Compiled& e) { return e.forms != forms; });
  if (compiled_.size() >= kMaxCompiled) compiled_.erase(compiled_.begin());
  compiled_.push_back({forms, shown, set});
  return set;
}

}  // namespace sandgate::broker
