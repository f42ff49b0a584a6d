// Reading the `tokens:` section: the keys that sign task tokens, their lifetime and leeway,
// revocations, and the audience and issuer a token must name.
#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <map>
#include <utility>

#include "config/readers.h"

namespace sandgate::config::detail {

namespace {

// "2026-11-01T00:00:00Z" (UTC, as RFC 3339 writes it) or Unix seconds.
std::optional<int64_t> parseTime(std::string_view s) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && end == s.data() + s.size() && n >= 0) return n;
  std::tm tm{};
  std::string text(s);
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (!rest || *rest != '\0') return std::nullopt;
  const time_t t = ::timegm(&tm);
  if (t < 0) return std::nullopt;
  return static_cast<int64_t>(t);
}

}  // namespace

void readTokens(Reader& r, const Field& f, std::optional<Tokens>& out) {
  auto m = r.map(f, {"keys", "max_ttl", "leeway", "revoked", "audience", "issuer"},
                 "a map with keys, max_ttl, leeway, revoked, audience, issuer");
  if (!m) return;
  Tokens t;
  if (const Field* k = m->get("keys")) {
    if (auto items = r.list(*k, "a list of keys ({id, algorithm, file})", false)) {
      std::map<std::string, int, std::less<>> seen;  // id -> line
      for (const auto& item : *items) {
        auto km = r.map(item, {"id", "algorithm", "file", "revoked_before"},
                        "a key (a map with id, algorithm, file, revoked_before)");
        if (!km) continue;
        TokenKey key;
        key.mark = item.mark;
        if (const Field* id = km->get("id")) {
          if (auto v = r.string(*id, "a key id (the JWT header's kid)")) {
            if (v->value.size() > 64 ||
                v->value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789._-") != std::string::npos) {
              r.error(id->mark, id->path,
                      fmt::format("expected up to 64 letters, digits, '.', '_' or '-', got {}",
                                  quoted(v->value)));
            } else if (auto [it, fresh] = seen.emplace(v->value, id->mark.line); !fresh) {
              r.error(
                  id->mark, id->path,
                  fmt::format("duplicate key id `{}` (first at line {})", v->value, it->second));
            }
            key.id = v->value;
          }
        } else {
          r.missing(item, "id", "the key's id, which tokens name in their `kid`");
        }
        if (const Field* a = km->get("algorithm")) {
          if (auto v = r.string(*a, "HS256, EdDSA or ES256")) {
            if (v->value == "HS256") {
              key.algorithm = TokenKey::Algorithm::kHS256;
            } else if (v->value == "EdDSA") {
              key.algorithm = TokenKey::Algorithm::kEdDSA;
            } else if (v->value == "ES256") {
              key.algorithm = TokenKey::Algorithm::kES256;
            } else {
              r.error(a->mark, a->path,
                      fmt::format("expected HS256, EdDSA or ES256, got {}", quoted(v->value)));
            }
          }
        }
        if (const Field* file = km->get("file")) {
          if (auto v = r.string(*file, "a file path")) key.file = v->value;
        } else {
          r.missing(item, "file",
                    "the key's file (HS256: the shared key; EdDSA, ES256: a PEM public key)");
        }
        if (const Field* rb = km->get("revoked_before")) {
          if (auto v = r.string(*rb, "a time such as 2026-11-01T00:00:00Z")) {
            if (auto when = parseTime(v->value)) {
              key.revokedBefore = *when;
            } else {
              r.error(rb->mark, rb->path,
                      fmt::format("expected a UTC time such as 2026-11-01T00:00:00Z or Unix "
                                  "seconds, got {}",
                                  quoted(v->value)));
            }
          }
        }
        t.keys.push_back(std::move(key));
      }
    }
  } else {
    r.missing(f, "keys", "the keys that sign task tokens");
  }
  if (const Field* v = m->get("max_ttl")) {
    if (auto d = r.duration(*v, false)) t.maxTtl = *d;
  }
  if (const Field* v = m->get("leeway")) {
    if (auto d = r.duration(*v, true)) t.leeway = *d;
  }
  // A token must then carry them: a token minted for another service (or by another
  // issuer) with a key this config also trusts is refused.
  for (auto [key, into] : {std::pair{"audience", &t.audience}, std::pair{"issuer", &t.issuer}}) {
    if (const Field* v = m->get(key)) {
      if (auto s = r.string(*v, "a string (the tokens' `aud` / `iss`)")) {
        if (s->value.empty()) {
          r.error(v->mark, v->path, "expected a non-empty string");
        } else {
          *into = s->value;
        }
      }
    }
  }
  if (const Field* v = m->get("revoked")) {
    if (auto ids = r.stringList(*v, "[jti-1, jti-2]")) {
      for (auto& id : *ids) t.revoked.push_back(std::move(id.value));
    }
  }
  out = std::move(t);
}

}  // namespace sandgate::config::detail
