// loadFile/loadString: YAML text to a validated Config, or every problem found in it.
#include <fmt/format.h>
#include <openssl/sha.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <utility>

#include "config/load_report.h"
#include "config/approvals.h"
#include "config/readers.h"

namespace sandgate::config {
namespace {

using detail::Field;
using detail::Reader;

// A config is a page of YAML; anything this large is the wrong file, and reading it whole
// would let a mistaken path (a log, a device) exhaust memory.
constexpr size_t kMaxConfigBytes = 16 * 1024 * 1024;

const std::vector<std::string_view> kTopLevelKeys = {
    "listen",  "credentials", "policies",    "tasks", "global",      "limits",  "resolve", "audit",
    "metrics", "ca",          "ca_cert_out", "tls",   "transparent", "sandbox", "tokens",
    // Parent proxies (upstream_reader.cc).
    "upstream_proxies", "upstream_proxy_default", "upstream_proxy_direct",
    // LLM prices (llm_reader.cc).
    "llm",
    // Shared counters (state_reader.cc).
    "state",
    // The SSH broker (issue #42).
    "ssh"};

// yaml-cpp's message for a tab in indentation is often "illegal map value" somewhere near it;
// pointing at the tab itself is far more useful. Returns the first indentation tab at or
// before `lastLine` (1-based).
std::optional<Mark> indentationTab(const std::string& text, int lastLine) {
  int line = 1;
  size_t start = 0;
  while (start <= text.size() && line <= lastLine) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    for (size_t i = start; i < end && (text[i] == ' ' || text[i] == '\t'); ++i) {
      if (text[i] == '\t') return Mark{line, static_cast<int>(i - start) + 1};
    }
    start = end + 1;
    ++line;
  }
  return std::nullopt;
}

Diagnostic parseError(const std::string& text, const std::string& name,
                      const YAML::ParserException& e) {
  Mark at = detail::toMark(e.mark);
  if (auto tab = indentationTab(text, at.line > 0 ? at.line : 1 << 30)) {
    return Diagnostic{name, tab->line, tab->col, "",
                      "tab character in indentation; YAML indents with spaces only"};
  }
  // yaml-cpp's messages name the parser state, not the likely mistake; add the usual cause.
  static constexpr std::pair<std::string_view, std::string_view> kHints[] = {
      {"end of map not found", " (is this line indented like the keys above it?)"},
      {"end of sequence flow not found", " (a `[` above is not closed with `]`)"},
      {"end of map flow not found", " (a `{` above is not closed with `}`)"},
      {"illegal map value", " (quote a value that contains `: `)"},
  };
  std::string message = fmt::format("invalid YAML: {}", e.msg);
  for (auto [msg, hint] : kHints) {
    if (e.msg == msg) message += hint;
  }
  return Diagnostic{name, at.line, at.col, "", std::move(message)};
}

// The `---` line that starts the document at `docLine`, or the document's own line.
int documentStartLine(const std::string& text, int docLine) {
  int found = docLine;
  int line = 1;
  for (size_t start = 0; start < text.size() && line <= docLine; ++line) {
    if (text.compare(start, 3, "---") == 0) found = line;
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return found;
}

void readTop(Reader& r, const detail::MapView& top, Config& cfg) {
  using namespace detail;
  for (const auto& [key, f] : top.entries()) {
    if (key == "listen") {
      readListen(r, f, cfg.listen);
    } else if (key == "credentials") {
      readCredentials(r, f, cfg);
    } else if (key == "policies") {
      readPolicies(r, f, cfg);
    } else if (key == "tasks") {
      readTasks(r, f, cfg.tasks);
    } else if (key == "global") {
      readGlobal(r, f, cfg.global);
    } else if (key == "limits") {
      readLimits(r, f, cfg.limits);
    } else if (key == "resolve") {
      readResolve(r, f, cfg.resolve);
    } else if (key == "audit") {
      readAudit(r, f, cfg.audit);
    } else if (key == "metrics") {
      readMetrics(r, f, cfg.metrics);
    } else if (key == "ca") {
      readCa(r, f, cfg.ca);
    } else if (key == "ca_cert_out") {
      if (auto s = r.string(f, "a file path")) cfg.caCertOut = s->value;
    } else if (key == "tls") {
      readTls(r, f, cfg.tls);
    } else if (key == "transparent") {
      readTransparent(r, f, cfg.transparent);
    } else if (key == "sandbox") {
      readSandbox(r, f, cfg.sandbox);
    } else if (key == "tokens") {
      readTokens(r, f, cfg.tokens);
    } else if (key == "llm") {
      readLlm(r, f, cfg.llm);
    } else if (key == "upstream_proxies") {
      readUpstreamProxies(r, f, cfg);
    } else if (key == "upstream_proxy_default") {
      readUpstreamDefault(r, f, cfg);
    } else if (key == "upstream_proxy_direct") {
      readUpstreamDirect(r, f, cfg);
    } else if (key == "state") {
      readState(r, f, cfg);
    } else if (key == "ssh") {
      readSshBroker(r, f, cfg.ssh);
    }
  }
}

// Where each document of a YAML stream starts, and nothing else.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The first document of `text` (null when there is none) and where a second one starts, if
// any. Not YAML::LoadAll: yaml-cpp 0.7 (Debian 12's) loops there for ever, adding a null
// document each time round, on a token no document can start with, such as a lone ','
// (yaml-cpp issue #1040, fixed upstream after 0.8.0), so one stray comma would hang a reload
// until memory ran out. A config needs only its first document and whether there is a second,
// so the parser is asked for two documents at most, and a second one that starts where the
// first did (no input consumed) is that token. Throws what the parser throws.
struct FirstDocument {
  YAML::Node node;
  std::optional<YAML::Mark> second;
  std::optional<YAML::Mark> stuck;  // the token the parser cannot get past
};
FirstDocument firstDocument(const std::string& text) {
  FirstDocument out;
  out.node = YAML::Load(text);
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (starts.starts.size() < 2 && parser.HandleNextDocument(starts)) {
  }
  if (starts.starts.size() == 2) {
    if (starts.starts[1].pos == starts.starts[0].pos) {
      out.stuck = starts.starts[0];
    } else {
      out.second = starts.starts[1];
    }
  }
  return out;
}

}  // namespace

LoadReport readString(const std::string& text, const std::string& name) {
  auto only = [](Diagnostic d) { return LoadReport{std::nullopt, Diagnostics{std::move(d)}}; };
  FirstDocument doc;
  try {
    doc = firstDocument(text);
  } catch (const YAML::ParserException& e) {
    return only(parseError(text, name, e));
  } catch (const YAML::Exception& e) {
    return only(Diagnostic{name, 0, 0, "", fmt::format("invalid YAML: {}", e.what())});
  }
  if (doc.stuck) {
    const Mark at = detail::toMark(*doc.stuck);
    return only(Diagnostic{name, at.line, at.col, "",
                           "invalid YAML: no document can start here (a stray ',', ']' or '}'?)"});
  }
  if (doc.node.IsNull() && !doc.second) {
    return only(
        Diagnostic{name, 1, 1, "",
                   "the config is empty; expected a map with keys such as policies and tasks"});
  }
  Reader r(name);
  if (doc.second) {
    // yaml-cpp would quietly use the first document; a second one is a pasting accident.
    Mark at = detail::toMark(*doc.second);
    r.error({documentStartLine(text, at.line), 1}, "",
            "a second YAML document; the config must be a single document");
    return {std::nullopt, r.take()};
  }
  Field root = r.root(doc.node);
  auto top = r.map(root, kTopLevelKeys, "a map of top-level keys (listen, policies, tasks, ...)");
  if (!top) return {std::nullopt, r.take()};
  Config cfg;
  cfg.file = name;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), md);
  for (unsigned char b : md) cfg.sha256 += fmt::format("{:02x}", b);
  readTop(r, *top, cfg);
  detail::checkReferences(r, cfg);
  detail::checkUpstreamReferences(r, cfg);
  detail::checkLlmReferences(r, cfg);
  detail::checkStateReferences(r, cfg);
  Diagnostics errors = r.take();
  // The approvals files (tasks[].ask.approvals), each checked on its own and named in its
  // errors: only a config that reads cleanly gets them (they extend its policies).
  if (errors.empty()) detail::loadApprovals(cfg, errors);
  return {std::move(cfg), std::move(errors)};
}

LoadReport readFile(const std::string& path) {
  auto fail = [&](std::string message) {
    return LoadReport{std::nullopt, {Diagnostic{path, 0, 0, "", std::move(message)}}};
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return fail(fmt::format("cannot read config: {}", std::strerror(errno)));
  std::string text;
  char buf[65536];
  for (;;) {
    size_t n = std::fread(buf, 1, sizeof buf, f.get());
    text.append(buf, n);
    if (text.size() > kMaxConfigBytes) {
      return fail(fmt::format("cannot read config: larger than {} bytes", kMaxConfigBytes));
    }
    if (n < sizeof buf) {
      if (std::ferror(f.get()))
        return fail(fmt::format("cannot read config: {}", std::strerror(errno)));
      break;
    }
  }
  return readString(text, path);
}

namespace {

Result<Config> complete(LoadReport report) {
  if (!report.errors.empty()) return std::move(report.errors);
  return std::move(*report.config);
}

}  // namespace

Result<Config> loadString(const std::string& text, const std::string& name) {
  return complete(readString(text, name));
}

Result<Config> loadFile(const std::string& path) { return complete(readFile(path)); }

}  // namespace sandgate::config
