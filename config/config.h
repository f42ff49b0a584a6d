// The typed, immutable configuration model that config/loader.cc fills from YAML.
//
// This layer is syntactic: types, unknown keys, references between sections (include,
// credential and policy names), duplicates and cycles. The meaning of host patterns, CIDRs,
// path globs and rule precedence is checked when policy/ compiles a Config.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/llm_api.h"  // LlmApi: the API a rule or credential speaks
#include "common/result.h"

namespace sandgate::config {

// Where a value was written: 1-based line and column in Config::file.
struct Mark {
  int line = 0;
  int col = 0;
};

template <typename T>
struct Located {
  T value{};
  Mark mark;
};

using Seconds = std::chrono::duration<double>;

enum class RuleMode { kEnforce, kAudit };

// A rule's `git:` block: what Git's smart HTTP may do through it (policy/git_rules.h).
struct GitPush {
  std::vector<Located<std::string>> refs;  // globs of refs a push may create or update
  bool allowDelete = false;                // `delete`
  bool tags = false;                       // refs/tags/*
};
struct GitRules {
  Mark mark;                                       // the `git:` key
  std::vector<Located<std::string>> repositories;  // owner/name globs; empty: none
  bool fetch = true;
  bool archive = false;         // `archive`: git-upload-archive over SSH (issue #42)
  std::optional<GitPush> push;  // absent: no ref may be pushed
};

// A rule's `llm:` block (or a credential's `llm: <api>`, which means {api} alone).
struct LlmRule {
  Mark mark;
  LlmApi api = LlmApi::kOpenai;
  std::vector<Located<std::string>> models;  // empty: any model (a spend budget needs a list)
  std::optional<uint64_t> maxTokens;         // the cap on a request's max output tokens
};

// One allow or deny rule as written.
struct Rule {
  Mark mark;            // the rule's own position (its first key, on the "- " line)
  std::string keyPath;  // e.g. "policies.agent.allow[2]" or "global.deny[0]"
  std::optional<Located<std::string>> host;   // exact, "*.suffix" or "re:<RE2>"
  std::vector<Located<std::string>> cidrs;    // "10.1.0.0/16", "127.0.0.1", "::1/128"
  std::vector<Located<uint16_t>> ports;       // empty: allow rules default to [443], deny to any
  std::vector<Located<std::string>> methods;  // empty: any method
  std::vector<Located<std::string>> paths;    // empty: any path; glob or "re:<RE2>"
  std::optional<Located<std::string>> credential;  // a key of Config::credentials
  RuleMode mode = RuleMode::kEnforce;
  bool inspect = false;  // intercept TLS even without credential/methods/paths
  std::optional<GitRules> git;
  // `via:` the parent proxies (names of Config::upstreamProxies, tried in order) what this rule
  // admits goes through; an empty list is `via: direct`. Absent: upstream_proxy_default.
  std::optional<std::vector<Located<std::string>>> via;
  Mark viaMark;
  std::optional<LlmRule> llm;  // requests through it are LLM API calls, read and accounted
};

// The window a budget counts in: a calendar minute, hour or day (UTC, aligned to the epoch, so
// that every replica counts in the same window), or the life of the counters (`run`).
enum class BudgetWindow { kMinute, kHour, kDay, kRun };

// One `budgets:` entry of a policy or a task: what the task may use in one window. Every limit
// set applies; at least one is set.
struct Budget {
  std::string name;
  Mark mark;
  std::string keyPath;  // "policies.agent.budgets[1]"
  BudgetWindow window = BudgetWindow::kRun;
  std::optional<uint64_t> requests;       // requests admitted
  std::optional<uint64_t> requestBytes;   // body bytes sent upstream
  std::optional<uint64_t> responseBytes;  // body bytes relayed back
  std::optional<uint64_t> inputTokens;    // LLM input tokens (usage as the provider reports it)
  std::optional<uint64_t> outputTokens;   // LLM output tokens
  std::optional<uint64_t> spendMicros;    // LLM spend, in millionths of llm.prices.currency
};

// "minute", "hour", "day", "run".
std::string_view windowName(BudgetWindow w);
std::optional<BudgetWindow> parseWindow(std::string_view s);

struct Policy {
  std::string name;
  Mark mark;
  std::vector<Located<std::string>> include;  // names of other policies
  std::vector<Rule> allow;
  std::vector<Rule> deny;
  std::vector<Budget> budgets;  // apply to every task under this policy
};

struct GithubApp;

struct CredentialSource {
  enum class Kind { kFile, kEnv, kExec, kGithubApp };
  Kind kind = Kind::kFile;
  std::string file;                            // kFile
  std::string env;                             // kEnv
  std::vector<std::string> exec;               // kExec: argv
  Seconds ttl{600};                            // kExec: cache lifetime
  std::shared_ptr<const GithubApp> githubApp;  // kGithubApp
  Mark mark;
};

// source.github_app: sandgate mints GitHub App installation tokens itself (broker/github_app.h).
struct GithubApp {
  uint64_t appId = 0;           // the JWT's `iss`
  CredentialSource privateKey;  // the App's PEM private key: file, env or exec
  uint64_t installationId = 0;
  // The repositories (names within the installation's account) every token is limited to;
  // a task may narrow them (Task::repositories).
  std::vector<Located<std::string>> repositories;
  // GitHub permission name -> read, write or admin, in the order written.
  std::vector<std::pair<std::string, std::string>> permissions;
  std::string api = "https://api.github.com";  // GitHub Enterprise: its API URL
  Mark mark;
};

struct Injection {
  enum class Kind { kHeader, kBasic, kQuery };
  Kind kind = Kind::kHeader;
  std::string header;              // kHeader
  std::string value = "{secret}";  // kHeader: template containing "{secret}"
  std::string username;            // kBasic
  std::string query;               // kQuery: parameter name
  Mark mark;
};

// inject.per_host: how the secret goes to one of the credential's hosts, when they differ
// (Basic for a git host, a Bearer header for its API).
struct HostInjection {
  Located<std::string> host;  // one of Credential::hosts, as written there
  Injection inject;
};

struct Credential {
  std::string name;
  Mark mark;
  CredentialSource source;
  std::vector<Located<std::string>> hosts;  // the only hosts it is ever sent to
  Injection inject;
  // Set: `inject` is unused and every host of `hosts` has its own entry (first match wins).
  std::vector<HostInjection> injectPerHost;
  std::optional<std::string> placeholder;  // env variable name given to the sandbox
  bool optional = false;                   // a missing source is not a start-up error
  bool allowPlaintext = false;             // may be injected into plain http:// requests
  // Whether `hosts`/`inject` were written: a credential only a parent proxy uses
  // (upstream_proxies[].credential) needs neither; any other does (references.cc).
  bool hostsWritten = false;
  bool injectWritten = false;
  bool scrub = true;                      // its secrets are replaced in responses
  std::optional<std::string> upstreamCa;  // extra CA bundle for this credential's hosts
  // `llm: <api>`: its hosts are that LLM API; a rule naming it without its own `llm:` block
  // reads as `llm: {api}` (no model list, no cap).
  std::optional<LlmApi> llm;
  Mark llmMark;
  // `ssh:` (issue #42): the secret is an OpenSSH private key the SSH broker (proxy/ssh/)
  // authenticates to `hosts` with as `user`; never injected into HTTP, so no `inject:`.
  struct Ssh {
    Mark mark;
    std::string user;
    // A known_hosts file (plain host names; hashed ones are refused): the only upstream host
    // keys the broker accepts. Read when serve starts and on every reload.
    std::string knownHosts;
  };
  std::optional<Ssh> ssh;
};

// Credentials by name; looked up by string_view without a copy of the name.
using Credentials = std::map<std::string, Credential, std::less<>>;

// Per-task resource limits; unset fields inherit from Config::limits.
struct Limits {
  std::optional<uint32_t> maxConnections;  // concurrent client connections
  std::optional<uint32_t> maxTunnels;      // concurrent CONNECT tunnels
  std::optional<double> newConnectionsPerSecond;
  std::optional<uint64_t> maxHeaderBytes;  // request head limit
  std::optional<Seconds> headerTimeout;
  std::optional<Seconds> bodyTimeout;
  std::optional<Seconds> idleTimeout;
  std::optional<Seconds> connectTimeout;
  std::optional<Seconds> shutdownGrace;
  std::optional<Seconds> revokeGrace;  // after a reload refuses an open tunnel
  // HTTP/2 inside interception: the bounds on what one client connection may make nghttp2
  // do (streams at once, the rapid-reset budget, header-block and ack floods).
  std::optional<uint32_t> h2MaxConcurrentStreams;
  std::optional<uint32_t> h2ResetBurst;
  std::optional<uint32_t> h2ResetsPerSecond;
  std::optional<uint32_t> h2MaxContinuations;
  std::optional<uint32_t> h2MaxSettings;
  std::optional<uint32_t> h2MaxOutboundAck;
};

// The defaults that apply when neither the task nor `limits:` sets a value.
struct EffectiveLimits {
  uint32_t maxConnections = 256;
  uint32_t maxTunnels = 256;
  double newConnectionsPerSecond = 100;
  uint64_t maxHeaderBytes = 64 * 1024;
  Seconds headerTimeout{10};
  Seconds bodyTimeout{10};
  Seconds idleTimeout{300};
  Seconds connectTimeout{10};
  Seconds shutdownGrace{10};
  Seconds revokeGrace{2};
  uint32_t h2MaxConcurrentStreams = 100;
  uint32_t h2ResetBurst = 1000;
  uint32_t h2ResetsPerSecond = 33;
  uint32_t h2MaxContinuations = 8;
  uint32_t h2MaxSettings = 32;
  uint32_t h2MaxOutboundAck = 1000;
};
EffectiveLimits resolveLimits(const Limits& global, const Limits& task);

// tasks[].mode: enforce (the default) or learn: a learning run admits what the task's policy
// would refuse for want of a rule (never what a guardrail or a deny rule refuses), without a
// credential, and audits it with verdict `learn` so that `policy learn` can draft the policy.
enum class TaskMode { kEnforce, kLearn };

// tasks[].on_unknown: what a request the policy would refuse for want of a rule gets: refused
// (deny, the default) or held while an operator answers (`ask`, with Task::ask).
enum class OnUnknown { kDeny, kAsk };

// tasks[].ask: how long a held request waits for an operator, where `--always` answers go, and
// how many questions may wait at once (a full queue refuses: a client cannot pile up holds).
struct Ask {
  Mark mark;
  Seconds timeout{30};
  std::optional<Located<std::string>> approvals;  // the approvals file (relative: to the config)
  uint32_t maxPending = 16;
};

struct Task {
  std::string name;
  Mark mark;
  Located<std::string> policy;
  std::optional<std::string> tokenSha256;  // lower-case hex, 64 chars
  Limits limits;
  // tasks[].admin_groups: when set, an admin client that is not root must hold one of these
  // groups (names or gids, resolved when serve starts) to use this task; unset, the admin
  // socket's own check (root or listen.admin_group) is all.
  std::optional<std::vector<Located<std::string>>> adminGroups;
  // tasks[].repositories: credential name -> the repositories this task's tokens of that
  // `github_app` credential are limited to (a subset of the source's): the task gets its own
  // token, which reaches no other task's repositories.
  std::map<std::string, std::vector<Located<std::string>>, std::less<>> repositories;
  Mark repositoriesMark;
  std::vector<Budget> budgets;  // in addition to its policy's
  TaskMode mode = TaskMode::kEnforce;
  Mark modeMark;
  OnUnknown onUnknown = OnUnknown::kDeny;
  std::optional<Ask> ask;  // set when on_unknown is ask (with its defaults if unwritten)
  // The approvals file's rules, loaded like an include of the task's policy: the name of the
  // synthetic policy that holds them (empty: none).
  std::string approvalsPolicy;
};

// The only directory listen.admin may name a socket in: every sandbox gets a private /run, so
// no sandbox can ever reach a socket under it.
inline constexpr std::string_view kAdminSocketDir = "/run/sandgate";

struct Listen {
  std::optional<Located<std::string>> proxy;    // "host:port"
  std::optional<Located<std::string>> metrics;  // "host:port"
  std::optional<Located<std::string>> admin;    // unix socket path under kAdminSocketDir
  // Group (name or numeric gid) that a process must hold (as its gid or a supplementary group)
  // to use the admin socket besides root: the socket is then 0660 and owned by that group.
  // Resolved when the server starts.
  std::optional<Located<std::string>> adminGroup;
};

struct Global {
  std::vector<Rule> allow;
  std::vector<Rule> deny;
};

// upstream_proxies[]: a parent proxy the upstream leg goes through (issue #44).
struct UpstreamProxy {
  enum class Scheme { kHttp, kHttps, kSocks5 };
  enum class Resolve { kLocal, kParent };
  std::string name;
  Mark mark;
  Scheme scheme = Scheme::kHttp;
  std::string host;  // a name or an IP address (no brackets)
  uint16_t port = 0;
  // A credential of `credentials:` whose secret is "user:password": Basic Proxy-Authorization
  // to an HTTP parent, RFC 1929 to a SOCKS5 one.
  std::optional<Located<std::string>> credential;
  // local: sandgate resolves the target and vets every address before asking the parent for
  // one of them; parent: the parent gets the name and resolves it (the deny ranges then apply
  // only to names the resolve: section maps and to literal addresses).
  Resolve resolve = Resolve::kLocal;
};

// How the upstream leg is routed: parents, the default chain and what always goes direct.
struct UpstreamRouting {
  std::vector<UpstreamProxy> proxies;
  std::vector<Located<std::string>> defaults;  // upstream_proxy_default: names, in order
  // upstream_proxy_direct: "host", "*.suffix" or ".suffix" patterns and CIDRs.
  std::vector<Located<std::string>> direct;

  const UpstreamProxy* find(std::string_view name) const;
};

// A static name override: `name: address` or `name: address:port`.
struct ResolveEntry {
  std::string name;  // lower-cased, no trailing dot
  std::string address;
  std::optional<uint16_t> port;
  Mark mark;
};

// state.redis: budgets counted in a shared Redis so that replicas share them (issue #41).
// Absent: in-process counters, one replica.
struct RedisState {
  enum class Fail { kClosed, kOpen };
  Mark mark;
  bool tls = false;  // rediss://: TLS, the server's certificate verified against tls roots
  std::string host;  // a name or an IP address (no brackets)
  uint16_t port = 6379;
  int db = 0;
  // A credential of `credentials:` whose secret is the AUTH password (never in the URL: the
  // config is not a secret store).
  std::optional<Located<std::string>> password;
  // closed: a request whose budget cannot be counted is refused (503 budget_unavailable);
  // open: it is admitted, audited (budget_fail_open) and counted in a metric.
  Fail fail = Fail::kClosed;
  std::string keyPrefix;  // put before every key (several deployments sharing one Redis)
};

struct State {
  std::optional<RedisState> redis;
};

struct Audit {
  std::optional<std::string> path;  // absent: stdout
};

// Top-level `ssh:` (issue #42): the SSH broker's own settings.
struct SshBroker {
  Mark mark;
  // The broker's host key (an OpenSSH or PEM private key file) presented to sandboxes;
  // absent: an Ed25519 key generated when serve starts (clients then need it from elsewhere).
  std::optional<std::string> hostKey;
  uint32_t maxSessionsPerTask = 16;  // concurrent SSH sessions one task may hold
};

// metrics.admin_api: the admin HTTP API on the metrics listener (proxy/admin/admin_api.h). Off
// without it. Its files are secrets, read at start and on every reload.
struct AdminApi {
  Mark mark;
  std::string tokenFile;  // the bearer token callers must send (Authorization: Bearer ...)
  // mint: the key POST /v1/tokens signs with: a tokens.keys[] id (its algorithm), and a file
  // (HS256: the shared key, by default that key's own file; EdDSA, ES256: the PEM private key).
  std::optional<std::string> mintKid;
  std::optional<std::string> mintFile;
  Mark mintMark;
};

struct Metrics {
  Seconds taskSeriesTtl{600};  // series of a task that is gone are dropped after this
  std::optional<AdminApi> adminApi;
};

struct Ca {
  std::string cert;
  std::string key;
};

struct Tls {
  std::optional<std::string> upstreamCa;  // extra roots added to the system store
  uint32_t leafCacheSize = 1024;          // minted leaf certificates kept (tls.leaf_cache_size)
};

// `sandgate run`'s transparent capture (issue #6).
struct Transparent {
  std::vector<uint16_t> ports;  // captured in addition to 80 and 443
  // The synthetic address pools (CIDR text; checked by proxy::captureConfig, for an embedded
  // proxy and for serve alike):
  // unset means 198.18.0.0/15 and fd53:4744:4e53::/64.
  std::optional<Located<std::string>> ipv4Range, ipv6Range;
};

// `sandgate run`'s sandbox (`sandbox:`). A limit that is nullopt is unlimited (written
// `unlimited`); an absent key, or no section at all, keeps the default below. The built-in
// config (default_config.cc) writes the same defaults out.
struct Sandbox {
  std::optional<uint64_t> memoryBytes = uint64_t{4} << 30;  // memory: 4G (tmpfs pages count)
  std::optional<uint32_t> pids = 1024;                      // pids: 1024
  std::optional<double> cpus;                               // cpus: unlimited
  std::optional<Seconds> timeout = Seconds{2 * 3600};       // timeout: 2h (wall clock)
  uint64_t tmpfsBytes = uint64_t{1} << 30;  // tmpfs_size: 1G, each of /tmp, /run, /dev/shm
  std::vector<std::string> readOnlyPaths;   // ro: absolute host paths shown read-only
  // id_range: root-launched runs take their uid/gid from [first, first + count); by default
  // 0x7E000000..0x7E00FFFF, far above the ranges distributions hand out (systemd reserves
  // 0x7FFF0000 and up, subuid ranges start at 100000).
  uint32_t idRangeFirst = 0x7E000000;
  uint32_t idRangeCount = 65536;
  // workspace_mode: overlay (the workspace is the read-only lower layer, the run's writes go to
  // its own upper layer) or bind (the workspace itself, read-write).
  std::string workspaceMode = "overlay";
  // disk: overlay mode's bound on what a run writes to the workspace (its upper layer on a
  // tmpfs of this size); unlimited by default. Bind mode has no upper layer and ignores it.
  std::optional<uint64_t> diskBytes;
};

// The highest uid an id range may include: (uid_t)-1 is "no uid" to setresuid(2) and chown(2).
inline constexpr uint32_t kMaxRangeId = 0xFFFFFFFEu;

// `path` as a read-only path of the sandbox (`sandbox.ro`, `--ro`), repeated and trailing
// slashes removed; nullopt with `why` set when it cannot be one: relative (it would depend on
// the launcher's cwd), with a `.` or `..` component, or `/` itself (the whole host, which the
// allowlisted view exists to keep out).
std::optional<std::string> normaliseReadOnlyPath(std::string_view path, std::string* why);

// The word that unsets a sandbox limit, in `sandbox:` and in `sandgate run`'s flags.
inline constexpr std::string_view kUnlimited = "unlimited";
// A pids limit: a decimal integer from 1 to 4294967295.
std::optional<uint32_t> parsePidsLimit(std::string_view s);
// A CPU limit in cores: a decimal number greater than 0 and at most kMaxCpus.
inline constexpr double kMaxCpus = 65536;
std::optional<double> parseCpusLimit(std::string_view s);

// `tokens:`: the keys that sign task tokens (JWTs an orchestrator mints for one task, checked
// by every replica on its own; see proxy/identity/task_token.h).
struct TokenKey {
  enum class Algorithm { kHS256, kEdDSA, kES256 };
  std::string id;  // the JWT header's `kid`
  Mark mark;
  Algorithm algorithm = Algorithm::kHS256;
  // HS256: the raw shared key (a secret: hidden from sandboxes like a credential file).
  // EdDSA, ES256: a PEM public key (the private key stays with the orchestrator).
  std::string file;
  // Unix seconds: tokens of this key issued (`iat`) before then are revoked.
  std::optional<int64_t> revokedBefore;
};

struct Tokens {
  std::vector<TokenKey> keys;
  Seconds maxTtl{24 * 3600};         // exp may be at most this far after iat (or now)
  Seconds leeway{30};                // clock skew allowed on exp, nbf and iat
  std::vector<std::string> revoked;  // jti values refused until removed
  // Set: every token's `aud` must name it / its `iss` must equal it (else ignored).
  std::optional<std::string> audience, issuer;
};

// "EdDSA" etc. as written in a config and in a JWT header's `alg`.
std::string_view algorithmName(TokenKey::Algorithm a);

// `llm.prices`: what a million tokens of each model cost, in `currency`. A price per million
// tokens is also the price of one token in millionths, the unit spend is counted in.
struct LlmPrice {
  Mark mark;
  double input = 0;
  double output = 0;
};
struct LlmPrices {
  Mark mark;
  std::string currency;  // e.g. "USD": shown with spend, never converted
  std::map<std::string, LlmPrice, std::less<>> models;
};
struct Llm {
  std::optional<LlmPrices> prices;
};

struct Config {
  std::string file;  // path the config was loaded from ("<embedded>" for built-ins)
  // Hex SHA-256 of the text it was loaded from: which config a replica runs. The text holds
  // no secret (credentials name their sources; tasks carry token hashes).
  std::string sha256;
  Listen listen;
  Credentials credentials;
  std::map<std::string, Policy> policies;
  std::vector<Task> tasks;
  Global global;
  Limits limits;
  std::vector<ResolveEntry> resolve;
  Audit audit;
  Metrics metrics;
  std::optional<Ca> ca;
  std::optional<std::string> caCertOut;
  Tls tls;
  Transparent transparent;
  Sandbox sandbox;
  std::optional<Tokens> tokens;
  UpstreamRouting upstream;  // upstream_proxies, upstream_proxy_default, upstream_proxy_direct
  Llm llm;                   // llm: prices
  State state;               // state.redis: shared counters
  SshBroker ssh;             // `ssh:`

  const Task* findTask(std::string_view name) const;
  // Paths a sandbox must not see: the credentials' `file:` sources and the files their `exec:`
  // commands are given as arguments, the CA key and the admin socket.
  std::vector<std::string> secretPaths() const;
};

// Loads and validates a config file. Every diagnostic carries file:line:col, the key path
// and what was expected; all problems found are reported, not just the first.
Result<Config> loadFile(const std::string& path);
// Same, from text already in memory; `name` is used as the file in diagnostics.
Result<Config> loadString(const std::string& text, const std::string& name);

// Parses "250ms", "10s", "5m", "2h" (a bare number is seconds).
std::optional<Seconds> parseDuration(std::string_view s);
// Parses "512", "64KiB", "2M", "2G", "1GiB" (powers of 1024) into bytes.
std::optional<uint64_t> parseSize(std::string_view s);

}  // namespace sandgate::config
