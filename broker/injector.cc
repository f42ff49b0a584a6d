// Credential injection and placeholder replacement for one outgoing request (see injector.h).
#include "broker/injector.h"

#include <fmt/format.h>

#include <algorithm>

#include "broker/encoding.h"

namespace sandgate::broker {

namespace {

// A host without IPv6 brackets or trailing dots; compared ignoring ASCII case. A view, not a
// copy: this runs for every request that carries a credential.
std::string_view bareHost(std::string_view h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  while (!h.empty() && h.back() == '.') h.remove_suffix(1);
  return h;
}

// Replaces every occurrence of `from` in `s` with `to`; returns whether any was replaced.
bool replaceAll(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return false;
  std::string out;
  size_t pos = 0;
  bool any = false;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
    any = true;
  }
  if (!any) return false;
  out.append(s, pos, std::string::npos);
  wipe(s);
  s = std::move(out);
  return true;
}

std::string hostList(const config::Credential& c) {
  std::string out;
  for (const auto& h : c.hosts) {
    if (!out.empty()) out += ", ";
    out += h.value;
  }
  return out;
}

struct Involved {
  const config::Credential* cred;
  const Placeholder* placeholder;  // set when the client sent this credential's placeholder
  bool inject;                     // the admitting rule's credential
  std::shared_ptr<const Secret> secret;
};

}  // namespace

bool credentialHostMatches(std::string_view pattern, std::string_view host) {
  const std::string_view p = bareHost(pattern);
  const std::string_view h = bareHost(host);
  if (p.empty() || h.empty()) return false;
  if (p.size() > 2 && p[0] == '*' && p[1] == '.') {
    const std::string_view suffix = p.substr(1);  // ".example.com"
    return h.size() > suffix.size() && iequals(h.substr(h.size() - suffix.size()), suffix);
  }
  return iequals(p, h);
}

Injector::Injector(std::shared_ptr<const SecretStore> store, const config::Credentials& credentials,
                   std::shared_ptr<const PlaceholderSet> placeholders)
    : store_(std::move(store)),
      credentials_(&credentials),
      placeholders_(std::move(placeholders)) {}

const config::Credential* Injector::find(std::string_view name) const {
  auto it = credentials_->find(name);
  return it == credentials_->end() ? nullptr : &it->second;
}

bool Injector::hostAllowed(const config::Credential& c, std::string_view host) const {
  return std::any_of(c.hosts.begin(), c.hosts.end(),
                     [&](const auto& h) { return credentialHostMatches(h.value, host); });
}

std::string Injector::replacementFor(const config::Credential& c) const {
  const Placeholder* p = placeholders_ ? placeholders_->forCredential(c.name) : nullptr;
  return p ? p->value : redactionMarker(c.name);
}

InjectResult Injector::apply(const OutgoingRequest& req, std::string_view credential) const {
  InjectResult result;
  auto refuse = [&](std::string_view why, std::string name, std::string detail) {
    result.reason = why;
    result.credential = std::move(name);
    result.detail = std::move(detail);
    return result;
  };
  Headers& headers = *req.headers;
  std::string& target = *req.target;

  // ---- checks: nothing is edited until all of them pass --------------------------------
  std::vector<Involved> involved;
  if (placeholders_) {
    for (const Placeholder* p : placeholders_->findAll(headers, target)) {
      const config::Credential* c = find(p->credential);
      if (!c) {
        return refuse(reason::kCredentialUnavailable, p->credential,
                      fmt::format("the request carries the placeholder of credential `{}`, which "
                                  "is not in the current configuration",
                                  p->credential));
      }
      if (!hostAllowed(*c, req.host)) {
        // The sandbox is trying to send a credential somewhere it must never go: a tripwire.
        return refuse(reason::kCredentialHostMismatch, c->name,
                      fmt::format("the request to {} carries the placeholder of credential `{}`, "
                                  "which may only be sent to {}",
                                  req.host, c->name, hostList(*c)));
      }
      involved.push_back({c, p, false, nullptr});
    }
  }
  if (!credential.empty()) {
    const config::Credential* c = find(credential);
    if (!c) {
      return refuse(reason::kCredentialUnavailable, std::string(credential),
                    fmt::format("no credential named `{}` in this configuration", credential));
    }
    if (!hostAllowed(*c, req.host)) {
      return refuse(reason::kCredentialHostMismatch, c->name,
                    fmt::format("credential `{}` may only be sent to {}, not {}", c->name,
                                hostList(*c), req.host));
    }
    auto it = std::find_if(involved.begin(), involved.end(),
                           [&](const Involved& i) { return i.cred == c; });
    if (it != involved.end()) {
      it->inject = true;
    } else {
      involved.push_back({c, nullptr, true, nullptr});
    }
  }
  for (auto& i : involved) {
    if (!req.tls && !i.cred->allowPlaintext) {
      return refuse(reason::kCredentialRequiresTls, i.cred->name,
                    fmt::format("credential `{}` is only sent over TLS; this is a plain http:// "
                                "request to {}",
                                i.cred->name, req.host));
    }
    Fetch f = store_->get(i.cred->name);
    if (!f.ok()) return refuse(f.reason, i.cred->name, std::move(f.detail));
    i.secret = std::move(f.secret);
  }

  // ---- edits ---------------------------------------------------------------------------
  size_t q = target.find('?');
  for (auto& i : involved) {
    const config::Credential& c = *i.cred;
    // reveal(): the secret goes into the outgoing request to a host its credential names,
    // which leaves only over verified TLS (or plaintext where the credential allows it).
    const std::string_view secret = i.secret->reveal();
    const std::string replacement = replacementFor(c);
    // A credential with `scrub: false` leaves responses as the upstream sent them.
    // Another form of the secret (Basic) is copied into protected memory only when it is to
    // be scrubbed. The secret's rule matches its URL forms too (ScrubRule::urlForms), so the
    // percent-encoded query value, and any re-encoding of it by the upstream, needs no rule.
    auto scrubForm = [&](std::string_view form, std::string shown) {
      if (c.scrub) addScrubRule(result.scrub, {Secret::copyOf(form), std::move(shown), c.name});
    };
    if (c.scrub) addScrubRule(result.scrub, {i.secret, replacement, c.name});

    if (i.placeholder) {
      const std::string& ph = i.placeholder->value;
      for (auto& [name, value] : headers) {
        if (iequals(name, "proxy-authorization")) continue;
        if (auto token = basicToken(value); !token.empty()) {
          if (auto decoded = base64Decode(token)) {
            std::string original(token);
            if (replaceAll(*decoded, ph, secret)) {
              std::string encoded = base64Encode(*decoded);
              wipe(*decoded);
              // The Basic form is what an echoing upstream would reflect: scrub it back to
              // what the client sent.
              scrubForm(encoded, original);
              std::string newValue = "Basic " + encoded;
              wipe(encoded);
              wipe(value);
              value = std::move(newValue);
              continue;
            }
          }
        }
        replaceAll(value, ph, secret);
      }
      if (q != std::string::npos) {
        std::string query = target.substr(q + 1);
        std::string encoded = percentEncode(secret);
        if (replaceAll(query, ph, encoded)) {
          std::string newTarget = target.substr(0, q + 1) + query;
          wipe(target);
          target = std::move(newTarget);
        }
        wipe(query);
        wipe(encoded);
      }
    }

    if (!i.inject) continue;
    const config::Injection& inj = c.inject;
    switch (inj.kind) {
      case config::Injection::Kind::kHeader: {
        std::erase_if(headers, [&](const auto& h) { return iequals(h.first, inj.header); });
        std::string value = inj.value;
        replaceAll(value, "{secret}", secret);
        headers.emplace_back(inj.header, std::move(value));
        break;
      }
      case config::Injection::Kind::kBasic: {
        std::erase_if(headers, [&](const auto& h) { return iequals(h.first, "authorization"); });
        std::string pair = inj.username + ":" + std::string(secret);
        std::string token = base64Encode(pair);
        wipe(pair);
        const Placeholder* p = placeholders_ ? placeholders_->forCredential(c.name) : nullptr;
        std::string shown = p ? base64Encode(inj.username + ":" + p->value) : replacement;
        scrubForm(token, std::move(shown));
        headers.emplace_back("Authorization", "Basic " + token);
        wipe(token);
        break;
      }
      case config::Injection::Kind::kQuery: {
        std::string path = target.substr(0, q);
        std::string query = q == std::string::npos ? "" : target.substr(q + 1);
        std::string kept;
        size_t start = 0;
        while (start <= query.size()) {
          size_t amp = query.find('&', start);
          if (amp == std::string::npos) amp = query.size();
          std::string_view param(query.data() + start, amp - start);
          std::string_view name = param.substr(0, param.find('='));
          auto decodedName = percentDecode(name, true);
          bool same = name == inj.query || (decodedName && *decodedName == inj.query);
          if (!param.empty() && !same) {
            if (!kept.empty()) kept += '&';
            kept.append(param);
          }
          start = amp + 1;
        }
        std::string encoded = percentEncode(secret);
        if (!kept.empty()) kept += '&';
        kept += percentEncode(inj.query) + "=" + encoded;
        wipe(encoded);
        wipe(query);
        std::string newTarget = path + "?" + kept;
        wipe(kept);
        wipe(target);
        target = std::move(newTarget);
        q = target.find('?');
        break;
      }
    }
  }
  result.credential = credential.empty() && !involved.empty() ? involved.front().cred->name
                                                              : std::string(credential);
  result.injected = !involved.empty();
  return result;
}

}  // namespace sandgate::broker
