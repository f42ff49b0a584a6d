// TaskSecrets: every secret one task can reach, as the forms sandgate scrubs from its responses.
// A secret read back on a connection that never carried it (a stored key listed by an API, an
// echo through another rule or another name of the same backend) is as much a leak as an echo
// of the request that sent it: each response of the task is scrubbed for all of them.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "broker/placeholder.h"
#include "broker/scrubber.h"
#include "broker/secret.h"
#include "config/config.h"

namespace sandgate::broker {

class SecretStore;

// One form of a secret as it goes out: the secret itself, or the token of `Authorization:
// Basic` (base64 of "username:secret"), which a response may echo as well.
struct SecretForm {
  std::string credential;
  std::shared_ptr<const Secret> bytes;
  std::optional<std::string> basicUser;  // set: bytes is the Basic token for this username
};

// What replaces `form` in a response: the placeholder in the same form (the Basic token of
// the placeholder) when the client holds one, else "[REDACTED:<credential>]".
ScrubRule scrubRuleFor(const SecretForm& form, const PlaceholderSet* placeholders);

// The forms of `secret` for credential `c`: the secret, and for `basic` its token (copied into
// protected memory). Empty for a credential with `scrub: false`.
std::vector<SecretForm> secretForms(const config::Credential& c,
                                    std::shared_ptr<const Secret> secret);

class TaskSecrets {
 public:
  // `names`: the credentials whose secrets the task's responses are scrubbed for (the proxy
  // passes every configured one, not only those the task's policy names). Those with `scrub:
  // false`, or not in `credentials`, are left out. Nothing is copied from `credentials` that
  // must outlive this object.
  // `task`: whose tokens a github_app credential's are (SecretStore::get).
  TaskSecrets(std::shared_ptr<const SecretStore> store, const config::Credentials& credentials,
              const std::vector<std::string>& names, std::string task = {});

  // No credential of the task is scrubbed: its responses are relayed as sent.
  bool empty() const { return credentials_.empty(); }

  // The forms of the credentials' current secrets (one that cannot be loaded now is left
  // out: no request can have sent it since). The same object while no secret changed, so a
  // caller can keep what it compiled from it. Thread-safe: one store lookup per credential.
  std::shared_ptr<const std::vector<SecretForm>> current() const;

  // The scrub set compiled from `forms` (what current() returned) with `shown`'s placeholders
  // as replacements: compiled once and shared by every connection of the task that sent no
  // other secret, since compiling grows with the number of secrets (every configured one is
  // scrubbed: 171 ms at 1,000, bench/RESULTS.md) and would otherwise be paid per connection.
  // Thread-safe; at most kMaxCompiled sets, those of older forms dropped first.
  std::shared_ptr<const ScrubSet> compiledFor(
      const std::shared_ptr<const std::vector<SecretForm>>& forms,
      const std::shared_ptr<const PlaceholderSet>& shown) const;
  static constexpr size_t kMaxCompiled = 16;

 private:
  std::shared_ptr<const SecretStore> store_;
  std::string task_;
  std::vector<config::Credential> credentials_;  // copies: name, inject, scrub
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const Secret>> sources_;  // what cached_ was made from
  mutable std::shared_ptr<const std::vector<SecretForm>> cached_;
  struct Compiled {
    std::shared_ptr<const std::vector<SecretForm>> forms;
    std::shared_ptr<const PlaceholderSet> shown;  // kept: its address is the key
    std::shared_ptr<const ScrubSet> set;
  };
  mutable std::mutex compiledMu_;
  mutable std::vector<Compiled> compiled_;
};

}  // namespace sandgate::broker
