// Reading `state:` (issue #41): where budgets are counted. `state.redis` names a shared Redis
// (its URL, the credential holding its password, what to do when it cannot answer).
#include <fmt/format.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <cctype>

#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

constexpr std::string_view kUrlWhat = "a Redis URL: redis://host:port/db or rediss://host:port/db";

// The URL: scheme, host, port and database only. User information is refused because the
// config is not a secret store (its text is hashed, logged on errors and often in git): the
// password belongs in `password:`, a credential name.
bool readUrl(Reader& r, const Field& f, RedisState& s) {
  auto v = r.string(f, kUrlWhat);
  if (!v) return false;
  auto u = boost::urls::parse_absolute_uri(v->value);
  auto bad = [&](std::string_view why) {
    r.error(f.mark, f.path, fmt::format("{}: expected {}", why, kUrlWhat));
    return false;
  };
  if (!u) return bad(fmt::format("{} is not a URL", quoted(v->value)));
  const std::string scheme(u->scheme());
  if (scheme == "redis") {
    s.tls = false;
  } else if (scheme == "rediss") {
    s.tls = true;
  } else {
    return bad(fmt::format("unsupported scheme `{}`", scheme));
  }
  if (u->has_userinfo()) {
    return bad(
        "the URL carries a user or password; name a credential in `password:` instead (the "
        "config is no place for a secret)");
  }
  if (u->has_query() || u->has_fragment()) return bad("a Redis URL has no query");
  if (u->host_type() == boost::urls::host_type::none || u->encoded_host().empty()) {
    return bad("no host");
  }
  if (u->host_type() == boost::urls::host_type::ipv6) {
    s.host = std::string(u->encoded_host_address());
  } else {
    s.host = std::string(u->host());
    std::transform(s.host.begin(), s.host.end(), s.host.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }
  if (u->has_port()) {
    if (u->port_number() == 0) return bad("port must be 1..65535");
    s.port = u->port_number();
  }
  std::string_view path = u->encoded_path();
  if (!path.empty() && path != "/") {
    path.remove_prefix(1);
    int db = 0;
    if (path.empty() || path.size() > 5 ||
        !std::all_of(path.begin(), path.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("the path is the database number, 0..65535");
    }
    for (char c : path) db = db * 10 + (c - '0');
    if (db > 65535) return bad("the path is the database number, 0..65535");
    s.db = db;
  }
  return true;
}

void readRedis(Reader& r, const Field& f, Config& cfg) {
  auto m = r.map(f, {"url", "password", "fail", "key_prefix"},
                 "a map with url, password, fail, key_prefix");
  if (!m) return;
  RedisState s;
  s.mark = f.mark;
  bool ok = true;
  if (const Field* u = m->get("url")) {
    ok &= readUrl(r, *u, s);
  } else {
    r.missing(f, "url", kUrlWhat);
    ok = false;
  }
  if (const Field* p = m->get("password")) {
    s.password = r.string(*p, "a credential name (its secret is the AUTH password)");
  }
  if (const Field* v = m->get("fail")) {
    if (auto w = r.string(*v, "closed or open")) {
      if (w->value == "closed") {
        s.fail = RedisState::Fail::kClosed;
      } else if (w->value == "open") {
        s.fail = RedisState::Fail::kOpen;
      } else {
        r.error(v->mark, v->path, fmt::format("expected closed or open, got {}", quoted(w->value)));
      }
    }
  }
  if (const Field* k = m->get("key_prefix")) {
    if (auto w = r.string(*k, "a key prefix")) {
      // Printable ASCII without spaces: the prefix is part of every key, and keys appear in
      // logs when Redis refuses one.
      const bool printable = std::all_of(w->value.begin(), w->value.end(),
                                         [](unsigned char c) { return c > 0x20 && c < 0x7f; });
      if (!printable || w->value.size() > 64) {
        r.error(k->mark, k->path, "expected up to 64 printable characters without spaces");
      } else {
        s.keyPrefix = w->value;
      }
    }
  }
  if (ok) cfg.state.redis = std::move(s);
}

}  // namespace

void readState(Reader& r, const Field& f, Config& cfg) {
  auto m = r.map(f, {"redis"}, "a map with redis");
  if (!m) return;
  if (const Field* redis = m->get("redis")) readRedis(r, *redis, cfg);
}

void checkStateReferences(Reader& r, const Config& cfg) {
  if (!cfg.state.redis || !cfg.state.redis->password) return;
  const auto& p = *cfg.state.redis->password;
  if (!cfg.credentials.contains(p.value)) {
    r.error(p.mark, "state.redis.password",
            fmt::format("unknown credential `{}` (the password is named, never written here)",
                        p.value));
  }
}

}  // namespace sandgate::config::detail
