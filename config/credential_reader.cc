// Reading `credentials:`: where each secret comes from, where it may go, how it is injected.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>

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

void readSource(Reader& r, const Field& f, CredentialSource& src, bool githubAppOk);

// `kinds`, and `extra` where it is allowed: a key's source and a per-host injection are one
// level down, where github_app and per_host do not nest.
std::vector<std::string_view> withKind(std::vector<std::string_view> kinds, std::string_view extra,
                                       bool allowed) {
  if (allowed) kinds.push_back(extra);
  return kinds;
}

// A repository name as GitHub's installation token API takes it: the name within the
// installation's account.
std::optional<std::string> repositoryNameProblem(std::string_view name) {
  if (name.find('/') != std::string_view::npos) {
    return fmt::format(
        "expected a repository name within the installation's account (`{}`, not `{}`)",
        name.substr(name.rfind('/') + 1), name);
  }
  const bool ok =
      name.size() <= 100 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      });
  if (!ok) {
    return fmt::format("expected a repository name (letters, digits, `-`, `_`, `.`), got {}",
                       quoted(name));
  }
  return std::nullopt;
}

void readGithubApp(Reader& r, const Field& f, CredentialSource& src) {
  auto m =
      r.map(f, {"app_id", "private_key", "installation_id", "repositories", "permissions", "api"},
            "a map with app_id, private_key, installation_id, repositories, permissions");
  if (!m) return;
  auto app = std::make_shared<GithubApp>();
  app->mark = f.mark;
  // The ids are positive integers; GitHub's are far below 2^53 (JSON numbers stay exact).
  constexpr uint64_t kMaxId = (uint64_t{1} << 53) - 1;
  if (const Field* v = m->get("app_id")) {
    if (auto n = r.integer(*v, 1, kMaxId)) app->appId = *n;
  } else {
    r.missing(f, "app_id", "the GitHub App's id (the JWT's issuer)");
  }
  if (const Field* v = m->get("installation_id")) {
    if (auto n = r.integer(*v, 1, kMaxId)) app->installationId = *n;
  } else {
    r.missing(f, "installation_id", "the id of the App's installation the tokens are for");
  }
  if (const Field* v = m->get("private_key")) {
    readSource(r, *v, app->privateKey, false);
  } else {
    r.missing(f, "private_key", "where the App's PEM private key comes from: file, env or exec");
  }
  if (const Field* v = m->get("repositories")) {
    if (auto repos = r.stringList(*v, "[widgets, tools-cli]")) {
      for (size_t i = 0; i < repos->size(); ++i) {
        if (auto why = repositoryNameProblem((*repos)[i].value)) {
          r.error((*repos)[i].mark, fmt::format("{}[{}]", v->path, i), *why);
        }
      }
      app->repositories = std::move(*repos);
    }
  } else {
    // Without the list GitHub would mint a token for every repository of the installation:
    // exactly the long-lived, all-reaching token this source exists to avoid.
    r.missing(f, "repositories",
              "the repositories the tokens are limited to (every token names them)");
  }
  if (const Field* v = m->get("permissions")) {
    if (auto perms = r.namedMap(*v, "a map of permission names to read, write or admin", false)) {
      for (const auto& [name, field] : perms->entries()) {
        const bool nameOk = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || c == '_';
        });
        if (!nameOk) {
          r.error(field.keyMark, field.path,
                  fmt::format("expected a GitHub permission name such as contents or "
                              "pull_requests, got {}",
                              quoted(name)));
          continue;
        }
        auto level = r.string(field, "read, write or admin");
        if (!level) continue;
        if (level->value != "read" && level->value != "write" && level->value != "admin") {
          r.error(field.mark, field.path,
                  fmt::format("expected read, write or admin, got {}", quoted(level->value)));
          continue;
        }
        app->permissions.emplace_back(name, level->value);
      }
    }
  } else {
    // Without them the token would carry every permission the installation was granted.
    r.missing(f, "permissions", "the permissions every token carries, e.g. { contents: write }");
  }
  if (const Field* v = m->get("api")) {
    if (auto s = r.string(*v, "an https:// URL")) {
      std::string url = s->value;
      while (url.size() > 8 && url.back() == '/') url.pop_back();
      const bool ok = url.starts_with("https://") && url.size() > 8 &&
                      url.find_first_of("?#@ \t") == std::string::npos;
      if (!ok) {
        r.error(v->mark, v->path,
                fmt::format("expected the API's https:// URL without query, fragment or user "
                            "(https://api.github.com, or https://HOST/api/v3 for GitHub "
                            "Enterprise Server), got {}",
                            quoted(s->value)));
      } else {
        app->api = std::move(url);
      }
    }
  }
  src.githubApp = std::move(app);
}

void readSource(Reader& r, const Field& f, CredentialSource& src, bool githubAppOk) {
  constexpr std::string_view kKinds = "`file`, `env`, `exec` or `github_app`";
  constexpr std::string_view kKeyKinds = "`file`, `env` or `exec`";
  const auto kinds = withKind({"file", "env", "exec"}, "github_app", githubAppOk);
  auto keys = kinds;
  keys.push_back("ttl");
  auto m = r.map(f, keys,
                 githubAppOk ? "a map with one of file, env, exec or github_app"
                             : "a map with one of file, env or exec");
  if (!m) return;
  src.mark = f.mark;
  const auto* kind = exactlyOne(r, f, *m, kinds, githubAppOk ? kKinds : kKeyKinds);
  if (kind) {
    const auto& [key, field] = *kind;
    if (key == "github_app") {
      src.kind = CredentialSource::Kind::kGithubApp;
      readGithubApp(r, field, src);
    } else if (key == "file") {
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

void readInject(Reader& r, const Field& f, Injection& inj, std::vector<HostInjection>* perHost) {
  constexpr std::string_view kKinds = "`header`, `bearer`, `basic` or `query`";
  constexpr std::string_view kTopKinds = "`header`, `bearer`, `basic`, `query` or `per_host`";
  const auto kinds =
      withKind({"header", "bearer", "basic", "query"}, "per_host", perHost != nullptr);
  auto keys = kinds;
  keys.push_back("value");
  auto m = r.map(f, keys,
                 perHost ? "a map with one of header (and value), bearer, basic, query or per_host"
                         : "a map with one of header (and value), bearer, basic or query");
  if (!m) return;
  inj.mark = f.mark;
  const auto* kind = exactlyOne(r, f, *m, kinds, perHost ? kTopKinds : kKinds);
  if (kind) {
    const auto& [key, field] = *kind;
    if (key == "per_host") {
      // Hosts are checked against the credential's `hosts` once both are read.
      if (auto hosts = r.namedMap(field, "a map of the credential's hosts to injections", false)) {
        for (const auto& [host, body] : hosts->entries()) {
          HostInjection h;
          h.host = Located<std::string>{host, body.keyMark};
          readInject(r, body, h.inject, nullptr);
          perHost->push_back(std::move(h));
        }
      }
    } else if (key == "header") {
      inj.kind = Injection::Kind::kHeader;
      if (auto s = r.string(field, "a header name")) inj.header = s->value;
    } else if (key == "bearer") {
      // `Authorization: Bearer <secret>`: the header form every OAuth-style API takes.
      inj.kind = Injection::Kind::kHeader;
      inj.header = "Authorization";
      inj.value = "Bearer {secret}";
      r.map(field, {}, "an empty map ({})", true);
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

// per_host names exactly the credential's hosts: a host without an entry would get no
// credential the operator chose, and an entry for a host not in `hosts` would never be used.
void checkPerHost(Reader& r, const Field& inject, const Credential& c) {
  if (c.injectPerHost.empty()) return;
  const std::string path = inject.path + ".per_host";
  for (const auto& h : c.injectPerHost) {
    const bool listed = std::any_of(c.hosts.begin(), c.hosts.end(),
                                    [&](const auto& x) { return x.value == h.host.value; });
    if (!listed) {
      r.error(h.host.mark, childPath(path, h.host.value),
              fmt::format("`{}` is not one of this credential's hosts; per_host names each "
                          "entry of `hosts` as written there",
                          h.host.value));
    }
  }
  for (const auto& host : c.hosts) {
    const bool covered = std::any_of(c.injectPerHost.begin(), c.injectPerHost.end(),
                                     [&](const auto& h) { return h.host.value == host.value; });
    if (!covered) {
      r.error(inject.mark, path,
              fmt::format("host `{}` of this credential has no entry in per_host (every host "
                          "in `hosts` needs one)",
                          host.value));
    }
  }
}

// `ssh: { user, known_hosts }`: the secret is an OpenSSH private key for the SSH broker.
void readSsh(Reader& r, const Field& f, Credential& c) {
  auto m = r.map(f, {"user", "known_hosts"}, "a map with user, known_hosts");
  if (!m) return;
  Credential::Ssh ssh;
  ssh.mark = f.keyMark;
  if (const Field* u = m->get("user")) {
    if (auto s = r.string(*u, "the upstream SSH user name, e.g. git")) {
      // The name goes into SSH's userauth request as is: a control character or space there
      // is never a real account and could only smuggle something into a log line.
      const bool ok = !s->value.empty() && s->value.size() <= 64 &&
                      std::all_of(s->value.begin(), s->value.end(), [](char ch) {
                        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ||
                               ch == '_' || ch == '.';
                      });
      if (ok) {
        ssh.user = s->value;
      } else {
        r.error(u->mark, u->path,
                fmt::format("expected a user name (letters, digits, `-`, `_`, `.`), got {}",
                            quoted(s->value)));
      }
    }
  } else {
    r.missing(f, "user", "the user the broker logs in to the upstream as, e.g. git");
  }
  if (const Field* k = m->get("known_hosts")) {
    if (auto s = r.string(*k, "a known_hosts file path")) ssh.knownHosts = s->value;
  } else {
    // No trust-on-first-use: without pinned keys every upstream would be refused anyway.
    r.missing(f, "known_hosts", "the known_hosts file pinning the upstream host keys");
  }
  c.ssh = std::move(ssh);
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
                    "upstream_ca", "scrub", "llm", "ssh"},
                   "a credential (a map with source, hosts, inject, llm or ssh)");
    if (!m) {
      // Already reported: no second error for the keys a broken body could not hold.
      c.hostsWritten = c.injectWritten = true;
      continue;
    }
    if (const Field* s = m->get("source")) {
      readSource(r, *s, c.source, true);
    } else {
      r.missing(body, "source", "where the secret comes from: file, env, exec or github_app");
    }
    if (const Field* h = m->get("hosts")) {
      c.hostsWritten = true;
      if (auto hosts = r.stringList(*h, "[api.example.com]")) c.hosts = std::move(*hosts);
    }
    const Field* sshField = m->get("ssh");
    if (const Field* i = m->get("inject")) {
      c.injectWritten = true;
      if (sshField) {
        // An SSH key is a private key, never a header or a password: injecting it into
        // HTTP would send it to whoever the request reaches.
        r.error(i->keyMark, i->path,
                "`inject` conflicts with `ssh`: an ssh credential is used by the SSH broker only "
                "and is never injected into HTTP");
      } else {
        readInject(r, *i, c.inject, &c.injectPerHost);
        checkPerHost(r, *i, c);
      }
    }
    if (sshField) {
      readSsh(r, *sshField, c);
      if (c.source.kind == CredentialSource::Kind::kGithubApp) {
        r.error(sshField->keyMark, sshField->path,
                "`ssh` needs an OpenSSH private key source (file, env or exec), not github_app");
      }
    }
    // Missing `hosts`/`inject` are reported by checkReferences(): a credential that only a
    // parent proxy uses needs neither, and upstream_proxies may come later in the file.
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
    if (const Field* l = m->get("llm")) {
      c.llm = readCredentialLlm(r, *l);
      c.llmMark = l->mark;
    }
  }
}

}  // namespace sandgate::config::detail
