// Reading the smaller sections: listen, limits, resolve, audit, metrics, ca, tls,
// transparent, sandbox.
#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <limits>
#include <map>
#include <utility>

#include "common/host_port.h"
#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::optional<Located<std::string>> hostPort(Reader& r, const Field& f, std::string_view example) {
  auto what = fmt::format("host:port such as {}", example);
  auto s = r.string(f, what);
  if (!s) return std::nullopt;
  if (!parseListenAddress(s->value)) {
    r.error(f.mark, f.path, fmt::format("expected {}, got {}", what, quoted(s->value)));
    return std::nullopt;
  }
  return s;
}

bool isIpv4(const std::string& s) {
  in_addr a{};
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool isIpv6(const std::string& s) {
  in6_addr a{};
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// "1.2.3.4", "1.2.3.4:8443", "::1", "[::1]", "[::1]:8443" -> address and optional port.
bool parseResolveAddress(const std::string& s, std::string& address,
                         std::optional<uint16_t>& port) {
  if (isIpv4(s) || isIpv6(s)) {
    address = s;
    return true;
  }
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') {
    address = s.substr(1, s.size() - 2);
    return isIpv6(address);
  }
  auto hp = parseHostPort(s);
  if (!hp) return false;
  if (hp->bracketed ? !isIpv6(hp->host) : !isIpv4(hp->host)) return false;
  address = hp->host;
  port = hp->port;
  return true;
}

// Lower-cases and drops one trailing dot: the form policy/ compares host names in.
std::string normaliseHostName(std::string_view name) {
  std::string out(name);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool isValidHostName(std::string_view name) {
  if (name.empty() || name.front() == '.' || name.find("..") != std::string_view::npos) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
  });
}

// "A-B" (inclusive, as in /etc/subuid listings) -> first and count; nullopt unless both are
// decimal and A <= B.
std::optional<std::pair<uint64_t, uint64_t>> parseIdRangeText(std::string_view s) {
  auto dash = s.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view t) -> std::optional<uint64_t> {
    if (t.empty() || t.size() > 10 ||
        !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    uint64_t v = 0;
    std::from_chars(t.data(), t.data() + t.size(), v);
    return v;
  };
  auto a = number(s.substr(0, dash));
  auto b = number(s.substr(dash + 1));
  if (!a || !b || *b < *a) return std::nullopt;
  return std::pair{*a, *b - *a + 1};
}

// A limit of `sandbox:` that `unlimited` unsets: `parse` reads any other scalar; on failure
// the message says "expected <what> or unlimited". Leaves `out` alone after an error.
template <typename T, typename Parse>
void readSandboxLimit(Reader& r, const Field* f, std::string_view what, std::optional<T>& out,
                      Parse parse) {
  if (f == nullptr) return;
  auto expected = fmt::format("{} or {}", what, kUnlimited);
  auto s = r.string(*f, expected);
  if (!s) return;
  if (s->value == kUnlimited) {
    out.reset();
  } else if (auto v = parse(s->value)) {
    out = *v;
  } else {
    r.error(f->mark, f->path, fmt::format("expected {}, got {}", expected, quoted(s->value)));
  }
}

}  // namespace

bool isValidName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

void checkName(Reader& r, const Mark& mark, const std::string& path, std::string_view name) {
  if (isValidName(name)) return;
  r.error(mark, path,
          fmt::format("invalid name {}; expected letters, digits, '.', '_' and '-' only",
                      quoted(name)));
}

bool isValidEnvName(std::string_view name) {
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Why `path` cannot be listen.admin, or nullopt. Every sandbox gets a private /run, so a
// socket under /run/sandgate is never reachable from inside one; anywhere else a sandbox's
// view of the host could include it (and through it adopt listeners as any task). `.` and
// `..` components and doubled slashes are refused so that the text compared is the path bound.
std::optional<std::string> adminPathProblem(std::string_view path) {
  const std::string dir = std::string(kAdminSocketDir) + "/";
  auto refuse = [&](std::string_view why) {
    return fmt::format(
        "{}, got {}; use a path under {} such as {}admin.sock (every sandbox "
        "has a private /run, so no sandbox can reach a socket there)",
        why, quoted(path), dir, dir);
  };
  if (path.substr(0, dir.size()) != dir || path.size() == dir.size()) {
    return refuse("the admin socket must be under " + dir);
  }
  for (std::string_view rest = path.substr(dir.size()); !rest.empty();) {
    auto slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..") {
      return refuse("expected a plain path without empty, `.` or `..` components");
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
    if (rest.empty()) return refuse("expected a socket path, not a directory");
  }
  // sockaddr_un holds 107 bytes and a NUL.
  if (path.size() > 107) {
    return fmt::format("a unix socket path has at most 107 bytes, got {}", path.size());
  }
  return std::nullopt;
}

void readListen(Reader& r, const Field& f, Listen& listen) {
  auto m = r.map(f, {"proxy", "metrics", "admin", "admin_group"},
                 "a map with proxy, metrics, admin, admin_group", true);
  if (!m) return;
  if (const Field* p = m->get("proxy")) listen.proxy = hostPort(r, *p, "127.0.0.1:3128");
  if (const Field* p = m->get("metrics")) listen.metrics = hostPort(r, *p, "127.0.0.1:9464");
  if (const Field* p = m->get("admin")) {
    listen.admin = r.string(*p, "a unix socket path");
    if (listen.admin) {
      if (auto why = adminPathProblem(listen.admin->value)) {
        r.error(p->mark, p->path, *why);
        listen.admin.reset();
      }
    }
  }
  if (const Field* p = m->get("admin_group")) {
    listen.adminGroup = r.string(*p, "a group name or numeric gid");
    if (listen.adminGroup && !m->get("admin")) {
      r.error(p->keyMark, p->path, "admin_group needs listen.admin (the socket it applies to)");
      listen.adminGroup.reset();
    }
  }
}

void readLimits(Reader& r, const Field& f, Limits& limits) {
  auto m =
      r.map(f,
            {"max_connections", "max_tunnels", "new_connections_per_second", "max_header_bytes",
             "header_timeout", "body_timeout", "idle_timeout", "connect_timeout", "shutdown_grace",
             "revoke_grace", "h2_max_concurrent_streams", "h2_reset_burst", "h2_resets_per_second",
             "h2_max_continuations", "h2_max_settings", "h2_max_outbound_ack"},
            "a map of limits", true);
  if (!m) return;
  constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  if (const Field* v = m->get("max_connections")) {
    if (auto n = r.integer(*v, 1, kMaxU32)) limits.maxConnections = static_cast<uint32_t>(*n);
  }
  if (const Field* v = m->get("max_tunnels")) {
    if (auto n = r.integer(*v, 1, kMaxU32)) limits.maxTunnels = static_cast<uint32_t>(*n);
  }
  if (const Field* v = m->get("new_connections_per_second")) {
    limits.newConnectionsPerSecond = r.positiveNumber(*v);
  }
  if (const Field* v = m->get("max_header_bytes")) limits.maxHeaderBytes = r.size(*v);
  if (const Field* v = m->get("header_timeout")) limits.headerTimeout = r.duration(*v, false);
  if (const Field* v = m->get("body_timeout")) limits.bodyTimeout = r.duration(*v, false);
  if (const Field* v = m->get("idle_timeout")) limits.idleTimeout = r.duration(*v, false);
  if (const Field* v = m->get("connect_timeout")) limits.connectTimeout = r.duration(*v, false);
  // 0 is meaningful here: close at once without waiting for connections to drain.
  if (const Field* v = m->get("shutdown_grace")) limits.shutdownGrace = r.duration(*v, true);
  // 0: a tunnel a reload refuses is closed at once.
  if (const Field* v = m->get("revoke_grace")) limits.revokeGrace = r.duration(*v, true);
  // HTTP/2 bounds (applied in proxy/h2/h2_limits.cc). A stream id is 31 bits; 0 is no bound
  // for nghttp2's SETTINGS and ack counts, so those start at 1. No CONTINUATION at all (0) is
  // a bound a config may choose: every header block must then fit one HEADERS frame.
  auto h2 = [&](const char* key, uint64_t lo, uint64_t hi, std::optional<uint32_t>& out) {
    if (const Field* v = m->get(key)) {
      if (auto n = r.integer(*v, lo, hi)) out = static_cast<uint32_t>(*n);
    }
  };
  h2("h2_max_concurrent_streams", 1, 0x7fffffff, limits.h2MaxConcurrentStreams);
  h2("h2_reset_burst", 1, kMaxU32, limits.h2ResetBurst);
  h2("h2_resets_per_second", 1, kMaxU32, limits.h2ResetsPerSecond);
  h2("h2_max_continuations", 0, kMaxU32, limits.h2MaxContinuations);
  h2("h2_max_settings", 1, kMaxU32, limits.h2MaxSettings);
  h2("h2_max_outbound_ack", 1, kMaxU32, limits.h2MaxOutboundAck);
}

void readResolve(Reader& r, const Field& f, std::vector<ResolveEntry>& resolve) {
  auto names = r.namedMap(f, "a map of host names to addresses", true);
  if (!names) return;
  std::map<std::string, int, std::less<>> seen;  // normalised name -> line
  for (const auto& [key, value] : names->entries()) {
    std::string name = normaliseHostName(key);
    if (!isValidHostName(name)) {
      r.error(value.keyMark, value.path,
              fmt::format("expected a host name (letters, digits, '-', '.'), got {}", quoted(key)));
      continue;
    }
    if (auto [it, fresh] = seen.emplace(name, value.keyMark.line); !fresh) {
      r.error(value.keyMark, value.path,
              fmt::format("`{}` is the same host as the entry at line {}", key, it->second));
      continue;
    }
    constexpr std::string_view kWhat =
        "an IP address, optionally with a port: 127.0.0.1, 127.0.0.1:8443, ::1 or [::1]:8443";
    auto s = r.string(value, kWhat);
    if (!s) continue;
    ResolveEntry e;
    e.name = std::move(name);
    e.mark = value.keyMark;
    if (!parseResolveAddress(s->value, e.address, e.port)) {
      r.error(value.mark, value.path, fmt::format("expected {}, got {}", kWhat, quoted(s->value)));
      continue;
    }
    resolve.push_back(std::move(e));
  }
}

void readAudit(Reader& r, const Field& f, Audit& audit) {
  auto m = r.map(f, {"path"}, "a map with path", true);
  if (!m) return;
  if (const Field* p = m->get("path")) {
    if (auto s = r.string(*p, "a file path")) audit.path = s->value;
  }
}

void readMetrics(Reader& r, const Field& f, Metrics& metrics) {
  auto m =
      r.map(f, {"task_series_ttl", "admin_api"}, "a map with task_series_ttl, admin_api", true);
  if (!m) return;
  if (const Field* t = m->get("task_series_ttl")) {
    if (auto d = r.duration(*t, false)) metrics.taskSeriesTtl = *d;
  }
  if (const Field* a = m->get("admin_api")) {
    auto am = r.map(*a, {"token_file", "mint"}, "a map with token_file, mint");
    if (!am) return;
    AdminApi api;
    api.mark = a->mark;
    if (const Field* t = am->get("token_file")) {
      if (auto v = r.string(*t, "a file path")) api.tokenFile = v->value;
    } else {
      r.missing(*a, "token_file", "the file holding the admin API's bearer token");
    }
    if (const Field* mint = am->get("mint")) {
      api.mintMark = mint->mark;
      if (auto mm = r.map(*mint, {"kid", "file"}, "a map with kid, file")) {
        if (const Field* k = mm->get("kid")) {
          if (auto v = r.string(*k, "a tokens.keys[] id")) api.mintKid = v->value;
        } else {
          r.missing(*mint, "kid", "the tokens.keys[] id the API mints with");
        }
        if (const Field* file = mm->get("file")) {
          if (auto v = r.string(*file, "a file path")) api.mintFile = v->value;
        }
      }
    }
    metrics.adminApi = std::move(api);
  }
}

void readCa(Reader& r, const Field& f, std::optional<Ca>& ca) {
  auto m = r.map(f, {"cert", "key"}, "a map with cert and key");
  if (!m) return;
  Ca out;
  bool ok = true;
  for (auto [key, dst] : {std::pair{"cert", &out.cert}, std::pair{"key", &out.key}}) {
    const Field* v = m->get(key);
    if (!v) {
      r.missing(f, key, "a PEM file path");
      ok = false;
    } else if (auto s = r.string(*v, "a PEM file path")) {
      *dst = s->value;
    } else {
      ok = false;
    }
  }
  if (ok) ca = std::move(out);
}

void readTls(Reader& r, const Field& f, Tls& tls) {
  auto m =
      r.map(f, {"upstream_ca", "leaf_cache_size"}, "a map with upstream_ca, leaf_cache_size", true);
  if (!m) return;
  if (const Field* u = m->get("upstream_ca")) {
    if (auto s = r.string(*u, "a CA bundle path")) tls.upstreamCa = s->value;
  }
  if (const Field* n = m->get("leaf_cache_size")) {
    // Bounded: each entry holds a key pair and certificate in memory.
    if (auto v = r.integer(*n, 1, 1000000)) tls.leafCacheSize = static_cast<uint32_t>(*v);
  }
}

// `ssh:`: the SSH broker's own host key and its per-task session bound (issue #42).
void readSshBroker(Reader& r, const Field& f, SshBroker& ssh) {
  auto m = r.map(f, {"host_key", "max_sessions_per_task"},
                 "a map with host_key, max_sessions_per_task", true);
  if (!m) return;
  ssh.mark = f.keyMark;
  if (const Field* k = m->get("host_key")) {
    if (auto s = r.string(*k, "a private key file path")) ssh.hostKey = s->value;
  }
  if (const Field* n = m->get("max_sessions_per_task")) {
    // Each session holds a thread and two SSH sessions: bounded like tunnels.
    if (auto v = r.integer(*n, 1, 4096)) ssh.maxSessionsPerTask = static_cast<uint32_t>(*v);
  }
}

void readTransparent(Reader& r, const Field& f, Transparent& t) {
  auto m = r.map(f, {"ports", "ipv4_range", "ipv6_range"},
                 "a map with ports, ipv4_range, ipv6_range", true);
  if (!m) return;
  if (const Field* p = m->get("ipv4_range")) t.ipv4Range = r.string(*p, "an IPv4 CIDR");
  if (const Field* p = m->get("ipv6_range")) t.ipv6Range = r.string(*p, "an IPv6 CIDR");
  if (const Field* p = m->get("ports")) {
    if (auto items = r.list(*p, "a list of ports, e.g. [8443]", true)) {
      for (const auto& item : *items) {
        // 53 is the DNS stub's, 3128 the proxy's: a capture listener cannot share them.
        auto port = r.integer(item, 1, 65535);
        if (port && (*port == 53 || *port == 3128)) {
          r.error(item.mark, item.path, "port " + std::to_string(*port) + " cannot be captured");
        } else if (port) {
          t.ports.push_back(static_cast<uint16_t>(*port));
        }
      }
    }
  }
}

void readSandbox(Reader& r, const Field& f, Sandbox& sb) {
  auto m = r.map(f,
                 {"memory", "pids", "cpus", "timeout", "tmpfs_size", "ro", "id_range",
                  "workspace_mode", "disk"},
                 "a map with memory, pids, cpus, timeout, tmpfs_size, ro, id_range, "
                 "workspace_mode, disk",
                 true);
  if (!m) return;
  auto positiveSize = [](std::string_view s) -> std::optional<uint64_t> {
    auto v = parseSize(s);
    return v && *v > 0 ? v : std::nullopt;
  };
  readSandboxLimit(r, m->get("memory"), "a size such as 4G or 512M", sb.memoryBytes, positiveSize);
  readSandboxLimit(r, m->get("disk"), "a size such as 2G or 512M", sb.diskBytes, positiveSize);
  readSandboxLimit(r, m->get("pids"), "an integer from 1 to 4294967295", sb.pids, parsePidsLimit);
  readSandboxLimit(r, m->get("cpus"), "a number of cores such as 2 or 1.5", sb.cpus,
                   parseCpusLimit);
  readSandboxLimit(r, m->get("timeout"), "a duration such as 90s, 30m or 2h", sb.timeout,
                   [](std::string_view s) -> std::optional<Seconds> {
                     auto d = parseDuration(s);
                     return d && d->count() > 0 ? d : std::nullopt;
                   });
  if (const Field* t = m->get("tmpfs_size")) {
    constexpr std::string_view kWhat = "a size such as 1G or 256M";
    if (auto s = r.string(*t, kWhat)) {
      auto v = positiveSize(s->value);
      if (s->value == kUnlimited) {
        // An unsized tmpfs takes up to half of RAM, each: exactly what sizing them prevents.
        r.error(t->mark, t->path,
                fmt::format("tmpfs_size cannot be unlimited; expected {}", kWhat));
      } else if (!v) {
        r.error(t->mark, t->path, fmt::format("expected {}, got {}", kWhat, quoted(s->value)));
      } else {
        sb.tmpfsBytes = *v;
      }
    }
  }
  if (const Field* p = m->get("ro")) {
    if (auto items = r.list(*p, "a list of absolute host paths, e.g. [/opt/toolchain]", true)) {
      std::map<std::string, int, std::less<>> seen;  // normalised path -> line
      for (const auto& item : *items) {
        auto s = r.string(item, "an absolute host path");
        if (!s) continue;
        std::string why;
        auto path = normaliseReadOnlyPath(s->value, &why);
        if (!path) {
          r.error(item.mark, item.path, fmt::format("{}, got {}", why, quoted(s->value)));
        } else if (auto [it, fresh] = seen.emplace(*path, item.mark.line); !fresh) {
          r.error(item.mark, item.path,
                  fmt::format("{} is already listed at line {}", quoted(*path), it->second));
        } else {
          sb.readOnlyPaths.push_back(std::move(*path));
        }
      }
    }
  }
  if (const Field* p = m->get("id_range")) readIdRange(r, *p, sb);
  if (const Field* w = m->get("workspace_mode")) {
    if (auto s = r.string(*w, "overlay or bind")) {
      if (s->value == "overlay" || s->value == "bind") {
        sb.workspaceMode = s->value;
      } else {
        r.error(w->mark, w->path,
                fmt::format("expected overlay or bind, got {}", quoted(s->value)));
      }
    }
  }
}

void readIdRange(Reader& r, const Field& f, Sandbox& sb) {
  constexpr std::string_view kWhat =
      "a uid range FIRST-LAST such as 2113929216-2113994751, or {first: N, count: N}";
  std::optional<uint64_t> first, count;
  if (f.node.IsMap()) {
    auto m = r.map(f, {"first", "count"}, kWhat);
    if (!m) return;
    const Field* a = m->get("first");
    const Field* n = m->get("count");
    if (!a) r.missing(f, "first", "the range's first uid");
    if (!n) r.missing(f, "count", "how many uids the range holds");
    if (a) first = r.integer(*a, 1, kMaxRangeId);
    if (n) count = r.integer(*n, 1, kMaxRangeId);
    if (!first || !count) return;
  } else {
    auto s = r.string(f, kWhat);
    if (!s) return;
    auto range = parseIdRangeText(s->value);
    if (!range) {
      r.error(f.mark, f.path, fmt::format("expected {}, got {}", kWhat, quoted(s->value)));
      return;
    }
    first = range->first;
    count = range->second;
  }
  // 0 is root; (uid_t)-1 means "no uid" to setresuid(2) and chown(2). Neither can be a run's.
  if (*first == 0) {
    r.error(f.mark, f.path, "the id range must not include 0 (root); start it at 1 or above");
    return;
  }
  if (*first + *count - 1 > kMaxRangeId) {
    r.error(f.mark, f.path,
            fmt::format("the id range {}-{} goes past {}, the highest uid there is", *first,
                        *first + *count - 1, kMaxRangeId));
    return;
  }
  sb.idRangeFirst = static_cast<uint32_t>(*first);
  sb.idRangeCount = static_cast<uint32_t>(*count);
}

}  // namespace sandgate::config::detail
