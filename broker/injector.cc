// Credential injection and placeholder replacement for one outgoing request (see injector.h).
#include "broker/injector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "broker/task_secrets.h"
#include "common/encoding.h"

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

// A client-chosen name (a header's, a query parameter's) shown in a refusal when it is a short
// token; else a stand-in, so that a refusal never echoes arbitrary request bytes.
std::string shownName(std::string_view name, std::string_view placeholder, std::string_view what) {
  const bool token =
      !name.empty() && name.size() <= 64 && name.find(placeholder) == std::string_view::npos &&
      std::all_of(name.begin(), name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
      });
  return token ? fmt::format("{} {}", what, name) : fmt::format("a {}", what);
}

bool containsForm(std::string_view text, std::string_view ph, bool percentDecoded) {
  if (text.find(ph) != std::string_view::npos) return true;
  if (!percentDecoded || text.find('%') == std::string_view::npos) return false;
  auto decoded = percentDecode(text, false);
  bool in = decoded && decoded->find(ph) != std::string::npos;
  if (decoded) wipe(*decoded);
  return in;
}

// Where the request carries placeholder `ph` outside the place credential `c` is injected (the
// place injection overwrites), as a few words for the refusal; nullopt when it is nowhere else.
// The same forms PlaceholderSet::findAll looks for: header names and values, the decoded token
// of a Basic value, the target raw and percent-decoded.
std::optional<std::string> misplacedAt(std::string_view ph, const config::Injection& inj,
                                       const Headers& headers, std::string_view target) {
  for (const auto& [name, value] : headers) {
    if (iequals(name, "proxy-authorization")) continue;
    const std::string_view token = basicToken(value);
    if (inj.kind == config::Injection::Kind::kHeader && iequals(name, inj.header)) continue;
    if (inj.kind == config::Injection::Kind::kBasic && iequals(name, "authorization") &&
        !token.empty()) {
      continue;
    }
    if (name.find(ph) != std::string::npos) return "a header name";
    bool in = value.find(ph) != std::string::npos;
    if (!in && !token.empty()) {
      if (auto decoded = base64Decode(token)) {
        in = decoded->find(ph) != std::string::npos;
        wipe(*decoded);
      }
    }
    if (in) return shownName(name, ph, "header");
  }
  const size_t q = target.find('?');
  if (containsForm(target.substr(0, q), ph, true)) return std::string("the path");
  if (q == std::string_view::npos) return std::nullopt;
  const std::string_view query = target.substr(q + 1);
  std::string rest;  // the query as it goes upstream, less the parameters injection replaces
  for (size_t start = 0; start <= query.size();) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view param = query.substr(start, amp - start);
    start = amp + 1;
    const std::string_view name = param.substr(0, param.find('='));
    if (inj.kind == config::Injection::Kind::kQuery) {
      // The parameters injection removes (by raw or decoded name, as injection does).
      auto decodedName = percentDecode(name, true);
      if (name == inj.query || (decodedName && *decodedName == inj.query)) continue;
    }
    if (containsForm(param, ph, true)) return shownName(name, ph, "query parameter");
    rest.append(param).append("&");
  }
  // A placeholder cut by '&' is not one; this catches what the walk above could not name.
  if (containsForm(rest, ph, true)) return std::string("the query");
  return std::nullopt;
}

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
                   std::shared_ptr<const PlaceholderSet> placeholders, std::string task)
    : store_(std::move(store)),
      credentials_(&credentials),
      placeholders_(std::move(placeholders)),
      task_(std::move(task)) {}

const config::Credential* Injector::find(std::string_view name) const {
  auto it = credentials_->find(name);
  return it == credentials_->end() ? nullptr : &it->second;
}

bool Injector::hostAllowed(const config::Credential& c, std::string_view host) const {
  return std::any_of(c.hosts.begin(), c.hosts.end(),
                     [&](const auto& h) { return credentialHostMatches(h.value, host); });
}

const config::Injection& injectionFor(const config::Credential& c, std::string_view host) {
  for (const auto& h : c.injectPerHost) {
    if (credentialHostMatches(h.host.value, host)) return h.inject;
  }
  return c.inject;
}

std::string injectionPlace(const config::Credential& c, std::string_view host) {
  const config::Injection& inj = injectionFor(c, host);
  switch (inj.kind) {
    case config::Injection::Kind::kHeader:
      return fmt::format("header {}", inj.header);
    case config::Injection::Kind::kBasic:
      return "Authorization: Basic";
    case config::Injection::Kind::kQuery:
      return fmt::format("query parameter {}", inj.query);
  }
  return "nowhere";
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
  std::vector<std::pair<const Placeholder*, const config::Credential*>> found;
  if (placeholders_) {
    for (const Placeholder* p : placeholders_->findAll(headers, target)) {
      result.placeholder = true;
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
      found.emplace_back(p, c);
    }
    // A placeholder is honoured only where its credential is injected, on a request that a
    // rule naming that credential admitted: anywhere else the secret could be stored by the
    // upstream and read back through a route (or an account) that carries no credential.
    for (const auto& [p, c] : found) {
      if (c->name != credential) {
        return refuse(
            reason::kPlaceholderMisplaced, c->name,
            fmt::format("possible exfiltration attempt: the request carries the placeholder of "
                        "credential `{}`, but the rule that admitted it {}; a placeholder is "
                        "honoured only on requests that a rule naming its credential admits",
                        c->name,
                        credential.empty() ? std::string("names no credential")
                                           : fmt::format("names credential `{}`", credential)));
      }
      if (auto where = misplacedAt(p->value, injectionFor(*c, req.host), headers, target)) {
        return refuse(reason::kPlaceholderMisplaced, c->name,
                      fmt::format("possible exfiltration attempt: the request carries the "
                                  "placeholder of credential `{}` in {}; it is honoured only in "
                                  "{}, where sandgate puts the secret",
                                  c->name, *where, injectionPlace(*c, req.host)));
      }
    }
  }
  // Only the rule's credential goes out: any placeholder left is its own, in its place.
  result.placeholder = !found.empty();
  if (credential.empty()) return result;
  const config::Credential* cp = find(credential);
  if (!cp) {
    return refuse(reason::kCredentialUnavailable, std::string(credential),
                  fmt::format("no credential named `{}` in this configuration", credential));
  }
  const config::Credential& c = *cp;
  if (c.ssh) {
    // An SSH private key (issue #42) is used by the SSH broker alone: a rule that admits HTTP
    // to its host must never put it into a request (it has no `inject`, so it would go as an
    // empty-named header).
    return refuse(reason::kCredentialUnavailable, c.name,
                  fmt::format("credential `{}` is an SSH key, used only by the SSH broker, never "
                              "injected into HTTP",
                              c.name));
  }
  if (!hostAllowed(c, req.host)) {
    return refuse(reason::kCredentialHostMismatch, c.name,
                  fmt::format("credential `{}` may only be sent to {}, not {}", c.name, hostList(c),
                              req.host));
  }
  if (!req.tls && !c.allowPlaintext) {
    return refuse(reason::kCredentialRequiresTls, c.name,
                  fmt::format("credential `{}` is only sent over TLS; this is a plain http:// "
                              "request to {}",
                              c.name, req.host));
  }
  Fetch f = store_->get(c.name, task_);
  if (!f.ok()) return refuse(f.reason, c.name, std::move(f.detail));
  const std::shared_ptr<const Secret> held = std::move(f.secret);

  // ---- edits ---------------------------------------------------------------------------
  size_t q = target.find('?');
  {
    // reveal(): the secret goes into the outgoing request to a host its credential names,
    // which leaves only over verified TLS (or plaintext where the credential allows it).
    const std::string_view secret = held->reveal();
    // What to scrub from the responses: the secret's forms (none with `scrub: false`). The
    // secret's rule matches its URL forms too (ScrubRule::urlForms), so the percent-encoded
    // query value, and any re-encoding of it by the upstream, needs no rule of its own.
    for (const auto& form : secretForms(c, held)) {
      addScrubRule(result.scrub, scrubRuleFor(form, placeholders_.get()));
    }

    const config::Injection& inj = injectionFor(c, req.host);
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
  result.credential = c.name;
  result.injected = true;
  return result;
}

}  // namespace sandgate::broker
