// The secrets of a task as scrub forms, kept current with the store (see task_secrets.h).
#include "broker/task_secrets.h"

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
  if (c.inject.kind == config::Injection::Kind::kBasic) {
    // reveal(): the Basic token is made from it to be found (and replaced) in responses; the
    // pair and its encoding are wiped, the token kept only in protected memory.
    std::string pair = c.inject.username + ":" + std::string(secret->reveal());
    std::string token = base64Encode(pair);
    wipe(pair);
    out.push_back({c.name, std::move(secret), std::nullopt});
    out.push_back({c.name, Secret::take(token), c.inject.username});
    return out;
  }
  out.push_back({c.name, std::move(secret), std::nullopt});
  return out;
}

TaskSecrets::TaskSecrets(std::shared_ptr<const SecretStore> store,
                         const config::Credentials& credentials,
                         const std::vector<std::string>& names)
    : store_(std::move(store)) {
  for (const auto& name : names) {
    auto it = credentials.find(name);
    if (it == credentials.end() || !it->second.scrub) continue;
    config::Credential c;
    c.name = it->second.name;
    c.inject = it->second.inject;
    c.scrub = true;
    credentials_.push_back(std::move(c));
  }
}

std::shared_ptr<const std::vector<SecretForm>> TaskSecrets::current() const {
  std::vector<std::shared_ptr<const Secret>> now;
  now.reserve(credentials_.size());
  for (const auto& c : credentials_) now.push_back(store_ ? store_->get(c.name).secret : nullptr);
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

}  // namespace sandgate::broker
