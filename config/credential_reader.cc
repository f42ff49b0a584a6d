// Reading `credentials:`: where each secret comes from, where it may go, how it is injected.
#include <fmt/format.h>

#include <map>

#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

// Returns the keys among `kinds` that `m` has, in document order.
std::vector<const std::pair<std::string, Field>*> presentKinds(
    const MapView& m, const std::vector<std::string_view>& kinds) {
  std::vector<const std::pair<std::string, Field>*> out;
  for (const auto& entry : m.entries()) {
    for (auto k : kinds) {
      if (entry.first == k) out.push_back(&entry);
    }
  }
  return out;
}

// Exactly one of `kinds` must be present; reports none or extras. Returns the one used.
const std::pair<std::string, Field>* exactlyOne(Reader& r, const Field& f, const MapView& m,
                                                const std::vector<std::string_view>& kinds,
                                                std::string_view expected) {
  auto present = presentKinds(m, kinds);
  if (present.empty()) {
    r.error(f.keyMark, f.path, fmt::format("expected exactly one of {}, got none", expected));
    return nullptr;
  }
  for (size_t i = 1; i < present.size(); ++i) {
    const auto& [key, field] = *present[i];
    r.error(field.keyMark, field.path,
            fmt::format("`{}` conflicts with `{}`: expected exactly one of {}", key,
                        present[0]->first, expected));
  }
  return present[0];
}

void readSource(Reader& r, const Field& f, CredentialSource& src) {
  constexpr std::string_view kKinds = "`file`, `env` or `exec`";
  auto m = r.map(f, {"file", "env", "exec", "ttl"}, "a map with one of file, env or exec");
  if (!m) return;
  src.mark = f.mark;
  const auto* kind = exactlyOne(r, f, *m, {"file", "env", "exec"}, kKinds);
  if (kind) {
    const auto& [key, field] = *kind;
    if (key == "file") {
      src.kind = CredentialSource::Kind::kFile;
      if (auto s = r.string(field, "a file path")) src.file = s->value;
    } else if (key == "env") {
      src.kind = CredentialSource::Kind::kEnv;
      if (auto s = r.string(field, "an environment variable name")) {
        if (isValidEnvName(s->value)) {
          src.env = s->value;
        } else {
          r.error(field.mark, field.path,
                  fmt::format("expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*), "
                              "got {}",
                              quoted(s->value)));
        }
      }
    } else {
      src.kind = CredentialSource::Kind::kExec;
      if (auto argv = r.stringList(field, "[/usr/local/bin/get-token, --scope, read]")) {
        for (auto& a : *argv) src.exec.push_back(std::move(a.value));
      }
    }
  }
  if (const Field* ttl = m->get("ttl")) {
    // file and env are read when needed; only a command's output is cached.
    if (kind && kind->first != "exec") {
      r.error(ttl->keyMark, ttl->path, "`ttl` applies only to `exec` sources");
    } else if (auto d = r.duration(*ttl, false)) {
      src.ttl = *d;
    }
  }
}

void readInject(Reader& r, const Field& f, Injection& inj) {
  constexpr std::string_view kKinds = "`header`, `basic` or `query`";
  auto m = r.map(f, {"header", "value", "basic", "query"},
                 "a map with one of header (and value), basic or query");
  if (!m) return;
  inj.mark = f.mark;
  const auto* kind = exactlyOne(r, f, *m, {"header", "basic", "query"}, kKinds);
  if (kind) {
    const auto& [key, field] = *kind;
    if (key == "header") {
      inj.kind = Injection::Kind::kHeader;
      if (auto s = r.string(field, "a header name")) inj.header = s->value;
    } else if (key == "basic") {
      inj.kind = Injection::Kind::kBasic;
      if (auto b = r.map(field, {"username"}, "a map with username")) {
        if (const Field* u = b->get("username")) {
          if (auto s = r.string(*u, "a user name")) inj.username = s->value;
        } else {
          r.missing(field, "username", "the user name sent with the secret as password");
        }
      }
    } else {
      inj.kind = Injection::Kind::kQuery;
      if (auto s = r.string(field, "a query parameter name")) inj.query = s->value;
    }
  }
  if (const Field* v = m->get("value")) {
    if (kind && kind->first != "header") {
      r.error(v->keyMark, v->path, "`value` applies only to `header` injection");
    } else if (auto s = r.string(*v, "a header value template containing {secret}")) {
      // Without the marker the secret would never be sent and the upstream would see a
      // constant: almost certainly a typo such as {SECRET} or {secrets}.
      if (s->value.find("{secret}") == std::string::npos) {
        r.error(
            v->mark, v->path,
            fmt::format("expected a template containing `{{secret}}`, got {}", quoted(s->value)));
      } else {
        inj.value = s->value;
      }
    }
  }
}

}  // namespace

void readCredentials(Reader& r, const Field& f, Config& cfg) {
  auto names = r.namedMap(f, "a map of credential names to credentials", true);
  if (!names) return;
  std::map<std::string, int, std::less<>> placeholders;  // variable -> line of first use
  for (const auto& [name, body] : names->entries()) {
    checkName(r, body.keyMark, body.path, name);
    Credential& c = cfg.credentials[name];
    c.name = name;
    c.mark = body.keyMark;
    auto m = r.map(body,
                   {"source", "hosts", "inject", "placeholder", "optional", "allow_plaintext",
                    "upstream_ca", "scrub"},
                   "a credential (a map with source, hosts, inject)");
    if (!m) continue;
    if (const Field* s = m->get("source")) {
      readSource(r, *s, c.source);
    } else {
      r.missing(body, "source", "where the secret comes from: file, env or exec");
    }
    if (const Field* h = m->get("hosts")) {
      if (auto hosts = r.stringList(*h, "[api.example.com]")) c.hosts = std::move(*hosts);
    } else {
      r.missing(body, "hosts", "the hosts this secret may be sent to");
    }
    if (const Field* i = m->get("inject")) {
      readInject(r, *i, c.inject);
    } else {
      r.missing(body, "inject", "how the secret is added: header, basic or query");
    }
    if (const Field* p = m->get("placeholder")) {
      if (auto s = r.string(*p, "an environment variable name")) {
        if (!isValidEnvName(s->value)) {
          r.error(p->mark, p->path,
                  fmt::format("expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*), "
                              "got {}",
                              quoted(s->value)));
        } else if (auto [it, fresh] = placeholders.emplace(s->value, p->mark.line); !fresh) {
          // Two credentials cannot both own one variable in the sandbox's environment.
          r.error(p->mark, p->path,
                  fmt::format("placeholder `{}` is already used by another credential (line {})",
                              s->value, it->second));
        } else {
          c.placeholder = s->value;
        }
      }
    }
    if (const Field* o = m->get("optional")) {
      if (auto b = r.boolean(*o)) c.optional = *b;
    }
    if (const Field* a = m->get("allow_plaintext")) {
      if (auto b = r.boolean(*a)) c.allowPlaintext = *b;
    }
    if (const Field* sc = m->get("scrub")) {
      if (auto b = r.boolean(*sc)) c.scrub = *b;
    }
    if (const Field* u = m->get("upstream_ca")) {
      if (auto s = r.string(*u, "a CA bundle path")) c.upstreamCa = s->value;
    }
  }
}

}  // namespace sandgate::config::detail
