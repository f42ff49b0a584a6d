// Reading `upstream_proxies:`, `upstream_proxy_default:` and `upstream_proxy_direct:` (issue
// #44): the parent proxies the upstream leg may go through, and checking the names that
// rules' `via:` and the default chain give them.
#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <map>

#include "config/readers.h"

namespace sandgate::config {

const UpstreamProxy* UpstreamRouting::find(std::string_view name) const {
  auto it = std::find_if(proxies.begin(), proxies.end(),
                         [&](const UpstreamProxy& p) { return p.name == name; });
  return it == proxies.end() ? nullptr : &*it;
}

namespace detail {
namespace {

constexpr std::string_view kUrlWhat =
    "a parent proxy URL: http://host:port, https://host:port or socks5://host:port";

// The URL of a parent: scheme, host and port only. User information is refused because the
// config is not a secret store (its text is hashed, logged on errors and often in git): a
// password belongs in `credential:`. A path, query or fragment would mean nothing to a proxy.
bool readUrl(Reader& r, const Field& f, UpstreamProxy& p) {
  auto s = r.string(f, kUrlWhat);
  if (!s) return false;
  auto u = boost::urls::parse_absolute_uri(s->value);
  auto bad = [&](std::string_view why) {
    r.error(f.mark, f.path, fmt::format("{}: expected {}", why, kUrlWhat));
    return false;
  };
  if (!u) return bad(fmt::format("{} is not a URL", quoted(s->value)));
  const std::string scheme(u->scheme());
  if (scheme == "http") {
    p.scheme = UpstreamProxy::Scheme::kHttp;
  } else if (scheme == "https") {
    p.scheme = UpstreamProxy::Scheme::kHttps;
  } else if (scheme == "socks5" || scheme == "socks5h") {
    p.scheme = UpstreamProxy::Scheme::kSocks5;
    // socks5h:// is curl's spelling for "the proxy resolves": say it with `resolve: parent`.
    if (scheme == "socks5h") p.resolve = UpstreamProxy::Resolve::kParent;
  } else {
    return bad(fmt::format("unsupported scheme `{}`", scheme));
  }
  if (u->has_userinfo()) {
    return bad(
        "the URL carries a user or password; name a `credential:` instead (the config is "
        "no place for a secret)");
  }
  if (!u->encoded_path().empty() && u->encoded_path() != "/") {
    return bad("a parent proxy URL has no path");
  }
  if (u->has_query() || u->has_fragment()) return bad("a parent proxy URL has no query");
  if (u->host_type() == boost::urls::host_type::none || u->encoded_host().empty()) {
    return bad("no host");
  }
  if (u->host_type() == boost::urls::host_type::ipv6) {
    p.host = std::string(u->encoded_host_address());
  } else {
    p.host = std::string(u->host());
    std::transform(p.host.begin(), p.host.end(), p.host.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }
  if (!u->has_port()) {
    // No guessing: 3128, 8080 and 1080 are all common for parents.
    return bad("the URL needs an explicit port");
  }
  if (u->port_number() == 0) return bad("port must be 1..65535");
  p.port = u->port_number();
  return true;
}

}  // namespace

void readUpstreamProxies(Reader& r, const Field& f, Config& cfg) {
  auto items = r.list(f, "a list of parent proxies (name, url, credential, resolve)", true);
  if (!items) return;
  std::map<std::string, int, std::less<>> seen;
  for (const auto& item : *items) {
    auto m = r.map(item, {"name", "url", "credential", "resolve"},
                   "a parent proxy (a map with name, url, credential, resolve)");
    if (!m) continue;
    UpstreamProxy p;
    p.mark = item.mark;
    bool ok = true;
    if (const Field* n = m->get("name")) {
      if (auto s = r.string(*n, "a name")) {
        checkName(r, n->mark, n->path, s->value);
        // `direct` is the word for "no parent" in `via:`.
        if (s->value == "direct") {
          r.error(n->mark, n->path, "`direct` means no parent in `via:`; choose another name");
        }
        if (auto [it, fresh] = seen.emplace(s->value, n->mark.line); !fresh) {
          r.error(n->mark, n->path,
                  fmt::format("parent `{}` is already defined at line {}", s->value, it->second));
          ok = false;
        }
        p.name = s->value;
      } else {
        ok = false;
      }
    } else {
      r.missing(item, "name", "what rules and upstream_proxy_default call this parent");
      ok = false;
    }
    if (const Field* u = m->get("url")) {
      ok &= readUrl(r, *u, p);
    } else {
      r.missing(item, "url", kUrlWhat);
      ok = false;
    }
    if (const Field* c = m->get("credential")) p.credential = r.string(*c, "a credential name");
    if (const Field* v = m->get("resolve")) {
      if (auto s = r.string(*v, "local or parent")) {
        if (s->value == "local") {
          p.resolve = UpstreamProxy::Resolve::kLocal;
        } else if (s->value == "parent") {
          p.resolve = UpstreamProxy::Resolve::kParent;
        } else {
          r.error(v->mark, v->path,
                  fmt::format("expected local or parent, got {}", quoted(s->value)));
        }
      }
    }
    // Names are registered even when the rest is broken: a `via:` naming it is not a second
    // error.
    if (!p.name.empty() && (ok || !cfg.upstream.find(p.name))) {
      cfg.upstream.proxies.push_back(std::move(p));
    }
  }
}

void readUpstreamDefault(Reader& r, const Field& f, Config& cfg) {
  if (auto list = r.stringList(f, "[corp, corp-backup]")) cfg.upstream.defaults = std::move(*list);
}

namespace {

// A CIDR ("10.0.0.0/8", "fd00::/8") or a single address.
bool isCidr(const std::string& s) {
  auto slash = s.find('/');
  const std::string addr = s.substr(0, slash);
  in6_addr a6{};
  in_addr a4{};
  const bool v4 = inet_pton(AF_INET, addr.c_str(), &a4) == 1;
  const bool v6 = !v4 && inet_pton(AF_INET6, addr.c_str(), &a6) == 1;
  if (!v4 && !v6) return false;
  if (slash == std::string::npos) return true;
  const std::string prefix = s.substr(slash + 1);
  if (prefix.empty() || prefix.size() > 3 ||
      !std::all_of(prefix.begin(), prefix.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return std::stoi(prefix) <= (v4 ? 32 : 128);
}

// "name", "*.suffix" or ".suffix": letters, digits, '-', '_' and dots, no other wildcard.
bool isHostPattern(std::string_view s) {
  if (s.substr(0, 2) == "*.") {
    s.remove_prefix(2);
  } else if (!s.empty() && s.front() == '.') {
    s.remove_prefix(1);
  }
  return !s.empty() && s.front() != '.' && s.find("..") == std::string_view::npos &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
         });
}

}  // namespace

void readUpstreamDirect(Reader& r, const Field& f, Config& cfg) {
  auto list = r.stringList(f, "[\"*.internal.example\", 10.0.0.0/8]");
  if (!list) return;
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& e = (*list)[i];
    const bool cidrLike = e.value.find('/') != std::string::npos ||
                          e.value.find(':') != std::string::npos ||
                          std::all_of(e.value.begin(), e.value.end(),
                                      [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
    if (cidrLike ? !isCidr(e.value) : !isHostPattern(e.value)) {
      r.error(e.mark, fmt::format("{}[{}]", f.path, i),
              fmt::format("expected a host (api.internal.example), a suffix (*.internal.example "
                          "or .internal.example) or a CIDR (10.0.0.0/8), got {}",
                          quoted(e.value)));
    }
  }
  cfg.upstream.direct = std::move(*list);
}

namespace {

std::string definedParents(const UpstreamRouting& u) {
  if (u.proxies.empty()) return "none are defined in upstream_proxies";
  std::string list;
  for (const auto& p : u.proxies) list += (list.empty() ? "" : ", ") + p.name;
  return "defined: " + list;
}

void checkVia(Reader& r, const Config& cfg, const std::vector<Rule>& rules) {
  for (const auto& rule : rules) {
    if (!rule.via) continue;
    for (size_t i = 0; i < rule.via->size(); ++i) {
      const auto& name = (*rule.via)[i];
      if (cfg.upstream.find(name.value)) continue;
      r.error(
          name.mark, fmt::format("{}.via[{}]", rule.keyPath, i),
          fmt::format("unknown upstream proxy `{}`; {}", name.value, definedParents(cfg.upstream)));
    }
  }
}

}  // namespace

void checkUpstreamReferences(Reader& r, const Config& cfg) {
  const auto& u = cfg.upstream;
  for (size_t i = 0; i < u.defaults.size(); ++i) {
    if (u.find(u.defaults[i].value)) continue;
    r.error(u.defaults[i].mark, fmt::format("upstream_proxy_default[{}]", i),
            fmt::format("unknown upstream proxy `{}`; {}", u.defaults[i].value, definedParents(u)));
  }
  for (size_t i = 0; i < u.proxies.size(); ++i) {
    const auto& p = u.proxies[i];
    if (!p.credential) continue;
    if (!cfg.credentials.contains(p.credential->value)) {
      r.error(p.credential->mark, fmt::format("upstream_proxies[{}].credential", i),
              fmt::format("unknown credential `{}`", p.credential->value));
    }
  }
  for (const auto& [name, p] : cfg.policies) {
    checkVia(r, cfg, p.allow);
  }
  checkVia(r, cfg, cfg.global.allow);
  // A credential needs `hosts` and `inject` unless a parent proxy is all that uses it: then
  // it only ever goes to that parent, as its Proxy-Authorization or SOCKS5 password. An `ssh`
  // credential needs `hosts` but no `inject`: the SSH broker is all that uses it.
  for (const auto& [credentialName, c] : cfg.credentials) {
    // (clang 14 cannot capture a structured binding; a reference declared from it, it can.)
    const std::string& name = credentialName;
    // The Redis AUTH password is used the same way: it only ever goes to that Redis.
    const bool parentOnly =
        std::any_of(u.proxies.begin(), u.proxies.end(),
                    [&](const auto& p) { return p.credential && p.credential->value == name; }) ||
        (cfg.state.redis && cfg.state.redis->password && cfg.state.redis->password->value == name);
    const std::string path = childPath("credentials", name);
    if (!c.hostsWritten && !parentOnly) {
      r.error(c.mark, path, "missing required key `hosts` (the hosts this secret may be sent to)");
    }
    if (!c.injectWritten && !parentOnly && !c.ssh) {
      r.error(c.mark, path,
              "missing required key `inject` (how the secret is added: header, bearer, basic, "
              "query or per_host)");
    }
  }
}

}  // namespace detail
}  // namespace sandgate::config
