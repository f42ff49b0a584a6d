// The section readers that loader.cc combines into a Config (internal to config/).
//
// Each reader fills its part of the Config from a Field and records every problem in the
// Reader; it never stops early. Names (policies, credentials) are registered even when their
// bodies are broken, so that references to them do not produce a second, misleading error.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace sandgate::config::detail {

// policies: and global: (rule_reader.cc).
void readPolicies(Reader& r, const Field& f, Config& cfg);
void readGlobal(Reader& r, const Field& f, Global& global);
// One allow rule, as a policy's `allow:` item (the approvals file's rules: approvals.cc).
std::optional<Rule> readAllowRule(Reader& r, const Field& f);

// budgets: of a policy or a task (budget_reader.cc).
std::vector<Budget> readBudgets(Reader& r, const Field& f);

// llm: (prices), a rule's `llm:` block, a credential's `llm: <api>`, and the checks joining
// them to credentials and spend budgets, after every section has been read (llm_reader.cc).
void readLlm(Reader& r, const Field& f, Llm& llm);
std::optional<LlmRule> readLlmRule(Reader& r, const Field& f);
std::optional<LlmApi> readCredentialLlm(Reader& r, const Field& f);
void checkLlmReferences(Reader& r, const Config& cfg);

// credentials: (credential_reader.cc).
void readCredentials(Reader& r, const Field& f, Config& cfg);

// The smaller sections (section_readers.cc).
void readListen(Reader& r, const Field& f, Listen& listen);
void readTasks(Reader& r, const Field& f, std::vector<Task>& tasks);
void readLimits(Reader& r, const Field& f, Limits& limits);
void readResolve(Reader& r, const Field& f, std::vector<ResolveEntry>& resolve);
void readAudit(Reader& r, const Field& f, Audit& audit);
void readMetrics(Reader& r, const Field& f, Metrics& metrics);
void readCa(Reader& r, const Field& f, std::optional<Ca>& ca);
void readTls(Reader& r, const Field& f, Tls& tls);
void readTransparent(Reader& r, const Field& f, Transparent& t);
void readSshBroker(Reader& r, const Field& f, SshBroker& ssh);
void readSandbox(Reader& r, const Field& f, Sandbox& sandbox);
void readTokens(Reader& r, const Field& f, std::optional<Tokens>& tokens);
// upstream_proxies:, upstream_proxy_default:, upstream_proxy_direct: (upstream_reader.cc).
void readUpstreamProxies(Reader& r, const Field& f, Config& cfg);
void readUpstreamDefault(Reader& r, const Field& f, Config& cfg);
void readUpstreamDirect(Reader& r, const Field& f, Config& cfg);
// Names in upstream_proxy_default and rules' `via:`, parents' credentials, and the `hosts` /
// `inject` every credential but a parent-only one needs. After every section has been read.
void checkUpstreamReferences(Reader& r, const Config& cfg);
// state: (state_reader.cc): state.redis, and that its password names a credential.
void readState(Reader& r, const Field& f, Config& cfg);
void checkStateReferences(Reader& r, const Config& cfg);  // after every section was read
void readIdRange(Reader& r, const Field& f, Sandbox& sandbox);  // sandbox.id_range

// References between sections: includes (unknown names, cycles), task policies and rule
// credentials (references.cc). Runs after every section has been read.
void checkReferences(Reader& r, const Config& cfg);

// Policy, credential and task names: letters, digits, '.', '_', '-'. They appear in key
// paths, metric labels and `task:token` proxy credentials, where ':' or spaces would break.
bool isValidName(std::string_view name);
// Reports `name` (written at `mark`) unless isValidName().
void checkName(Reader& r, const Mark& mark, const std::string& path, std::string_view name);
// Why `path` cannot be listen.admin (not a plain path under kAdminSocketDir, too long), or
// nullopt.
std::optional<std::string> adminPathProblem(std::string_view path);
// Environment variable names: [A-Za-z_][A-Za-z0-9_]*.
bool isValidEnvName(std::string_view name);

}  // namespace sandgate::config::detail
