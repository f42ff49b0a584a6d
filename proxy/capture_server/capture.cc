// The sandbox's DNS stub answers, counted and audited (see capture.h). Never forwards a query.
#include "proxy/capture_server/capture.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "capture/answer_policy.h"
#include "proxy/observe/audit.h"
#include "proxy/observe/listener_tally.h"
#include "proxy/observe/metrics.h"
#include "proxy/state/server_context.h"

namespace sandgate::proxy {

namespace {

std::string typeName(uint16_t t) {
  switch (t) {
    case capture::dns::kTypeA:
      return "A";
    case capture::dns::kTypeAaaa:
      return "AAAA";
    case capture::dns::kTypePtr:
      return "PTR";
    case capture::dns::kTypeHttps:
      return "HTTPS";
    case capture::dns::kTypeSvcb:
      return "SVCB";
    default:
      return fmt::format("TYPE{}", t);
  }
}

}  // namespace

void CaptureSockets::close() {
  for (int* fd : {&dnsUdp, &dnsTcp}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  for (int fd : listeners) ::close(fd);
  listeners.clear();
}

uint64_t CaptureCounts::queries() const {
  return answered + nodata + nxdomain + refused + notimp + exhausted + malformed;
}

std::string CaptureCounts::summary() const {
  return fmt::format(
      "{} answered, {} nodata, {} nxdomain, {} refused, {} notimp, {} pool_exhausted, {} "
      "malformed (dropped); {} names",
      answered, nodata, nxdomain, refused, notimp, exhausted, malformed, names);
}

CaptureContext::CaptureContext(CaptureOptions options, ServerState& state,
                               std::shared_ptr<ListenerTally> tally)
    : options_(std::move(options)),
      state_(state),
      tally_(std::move(tally)),
      pool_(std::make_shared<capture::SyntheticPool>(options_.v4, options_.v6)),
      responder_(
          pool_,
          [this](const std::string& name) {
            // The snapshot of this moment: a reload that denies a name stops answering it.
            auto snap = state_.snapshot.load();
            return capture::nameMayBeAllowed(*snap->engine, options_.task, name, options_.ports);
          },
          options_.ipv6) {}

void CaptureContext::count(std::string_view r) {
  namespace R = capture::dns_result;
  auto& c = r == R::kAnswered    ? answered_
            : r == R::kNoData    ? nodata_
            : r == R::kNxDomain  ? nxdomain_
            : r == R::kRefused   ? refused_
            : r == R::kNotImp    ? notimp_
            : r == R::kMalformed ? malformed_
                                 : exhausted_;
  c.fetch_add(1, std::memory_order_relaxed);
}

std::string CaptureContext::captureHint(const std::string& name) {
  if (name.empty()) return "";
  auto snap = state_.snapshot.load();
  // Every port an allow rule of the configuration names, less those this sandbox captures:
  // few, so a few more decisions per unknown name.
  std::set<uint16_t> candidates;
  for (const auto& [policyName, policy] : snap->config.policies) {
    for (const auto& rule : policy.allow) {
      for (const auto& port : rule.ports) candidates.insert(port.value);
    }
  }
  for (uint16_t p : options_.ports) candidates.erase(p);
  if (candidates.empty()) return "";
  const std::vector<uint16_t> list(candidates.begin(), candidates.end());
  auto ports = capture::portsAllowingName(*snap->engine, options_.task, name, list);
  if (ports.empty()) return "";
  std::string flags, numbers;
  for (uint16_t p : ports) {
    flags += fmt::format("{}--capture-port {}", flags.empty() ? "" : " ", p);
    numbers += fmt::format("{}{}", numbers.empty() ? "" : ", ", p);
  }
  std::string hint = fmt::format(
      "{}: the policy allows it on port {}, which this sandbox does not capture: add `{}`", name,
      numbers, flags);
  std::lock_guard lock(hintsMutex_);
  if (hints_.size() < CaptureCounts::kMaxHints &&
      std::find(hints_.begin(), hints_.end(), hint) == hints_.end()) {
    hints_.push_back(hint);
  }
  return hint;
}

capture::DnsOutcome CaptureContext::answer(std::span<const uint8_t> message, bool tcp,
                                           const std::string& client, const std::string& listener) {
  namespace R = capture::dns_result;
  auto start = std::chrono::steady_clock::now();
  auto out = responder_.answer(message, tcp);
  count(out.result);
  const Outcome verdict = out.result == R::kAnswered || out.result == R::kNoData ? Outcome::kAllow
                          : out.result == R::kPoolExhausted || out.result == R::kMalformed
                              ? Outcome::kError
                              : Outcome::kDeny;
  if (state_.metrics) {
    state_.metrics->task(options_.task)->request("dns", outcomeName(verdict), out.result);
  }
  if (out.result == R::kMalformed) {
    // No audit line: a flood of garbage must not flood the log. Counted above.
    spdlog::debug("dns {}: dropped a malformed query from {} ({})", listener, client,
                  capture::parseErrorName(out.error));
    return out;
  }
  AuditRecord rec;
  rec.time = std::chrono::system_clock::now();
  rec.kind = "dns";
  rec.mode = "transparent";
  rec.task = options_.task;
  rec.client = client;
  rec.listener = listener;
  rec.method = typeName(out.type);  // the query type
  rec.host = out.name;
  rec.verdict = verdict;
  rec.reason = out.result;
  rec.upstream = out.address;  // the synthetic address answered; nothing is ever dialled
  // An NXDOMAIN for a name the policy allows on a port the sandbox lacks reads like a broken
  // DNS to the workload: the audit line says which capture port would carry it.
  if (out.result == R::kNxDomain) {
    if (std::string hint = captureHint(out.name); !hint.empty()) rec.error = hint;
  }
  rec.durationSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (state_.audit) state_.audit->write(rec);
  if (tally_) tally_->add(rec);
  return out;
}

CaptureCounts CaptureContext::counts() const {
  CaptureCounts c;
  c.answered = answered_.load();
  c.nodata = nodata_.load();
  c.nxdomain = nxdomain_.load();
  c.refused = refused_.load();
  c.notimp = notimp_.load();
  c.exhausted = exhausted_.load();
  c.malformed = malformed_.load();
  c.names = pool_->size();
  std::lock_guard lock(hintsMutex_);
  c.hints = hints_;
  return c;
}

}  // namespace sandgate::proxy
