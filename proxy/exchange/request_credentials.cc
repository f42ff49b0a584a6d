// Credential checks, injection and response scrubbing for forwarded and intercepted requests
// (see request_credentials.h).
#include "proxy/exchange/request_credentials.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "broker/headers.h"
#include "broker/task_secrets.h"
#include "common/http_text.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/relay.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace http = boost::beast::http;

namespace {

broker::Headers toBrokerHeaders(const http::fields& f) {
  broker::Headers out;
  for (const auto& field : f) {
    out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return out;
}

void wipeAll(broker::Headers& hs) {
  for (auto& [name, value] : hs) broker::wipe(value);
}

// A coding's registered name, or a stand-in: the value is the upstream's to choose (an echo
// could put a secret there), so only a registered coding is named in logs and refusals.
std::string_view registeredName(std::string_view coding) {
  for (std::string_view known : {"gzip", "x-gzip", "deflate", "br", "compress", "x-compress",
                                 "zstd", "identity", "chunked"}) {
    if (boost::beast::iequals(coding, known)) return known;
  }
  return "an unregistered coding";
}

// The `how` label of sandgate_credential_injections_total.
std::string_view how(const broker::InjectResult& inj) {
  return inj.placeholder ? "placeholder" : "injected";
}

void replaceFields(http::fields& f, broker::Headers& hs) {
  f.clear();
  for (auto& [name, value] : hs) f.insert(name, value);
  wipeAll(hs);
}

// Methods whose response body is the request itself (RFC 9110 section 9.3.8; TRACK is IIS's).
bool echoesTheRequest(std::string_view method) {
  return iequals(method, "TRACE") || iequals(method, "TRACK");
}

}  // namespace

std::vector<ResponseCoding> responseCodings(const http::fields& res) {
  // A recipient reads every field line of a name as one comma-separated list (RFC 9110,
  // section 5.3): reading only the first would leave a second layer (identity, then gzip)
  // unseen, and the client would inflate an unscrubbed body.
  std::vector<ResponseCoding> out;
  for (const auto& f : res) {
    if (f.name() != http::field::content_encoding) continue;
    forEachListElement(f.value(), [&](std::string_view c) {
      if (!iequals(c, "identity")) out.push_back({"Content-Encoding", c});
    });
  }
  // Transfer codings are applied after the content codings. Only a final chunked is the
  // framing the parser has undone; a chunked anywhere else is a layer like any other.
  const size_t firstTransfer = out.size();
  for (const auto& f : res) {
    if (f.name() != http::field::transfer_encoding) continue;
    forEachListElement(f.value(), [&](std::string_view c) {
      out.push_back({"Transfer-Encoding", c});
    });
  }
  if (out.size() > firstTransfer && iequals(out.back().name, "chunked")) out.pop_back();
  return out;
}

CleanseOnExit::~CleanseOnExit() { cleanseRequestHead(head); }

std::optional<Refusal> RequestCredentials::apply(http::request_header<>& req, std::string_view host,
                                                 bool tls, const policy::Decision& decision,
                                                 RequestLog& log) {
  auto& rec = log.record;
  const TaskEntry& task = *c_.task;
  const auto& snap = *c_.snap;
  // Every response of a task whose policy names a scrubbed credential is scrubbed, so every
  // request of it asks for identity bodies (without the field any coding would be
  // acceptable: RFC 9110, section 12.5.3), whether or not it carries a secret itself.
  const bool scrubbed = task.secrets && !task.secrets->empty();
  auto sent = [&]() -> std::optional<Refusal> {
    if (scrubbed) req.set(http::field::accept_encoding, "identity");
    return std::nullopt;
  };
  if (!snap.secrets) {
    // No credentials are configured, so no request can carry a placeholder; a rule naming a
    // credential cannot pass validation then, but would fail closed here.
    if (decision.credential.empty()) return sent();
    rec.credential = decision.credential;
    return Refusal{.status = 502,
                   .reason = broker::reason::kCredentialUnavailable,
                   .task = task.name,
                   .host = rec.host,
                   .rule = decision.rule,
                   .detail = "no credentials are configured",
                   .outcome = Outcome::kError};
  }
  broker::Injector& injector = *this->injector();
  // Nothing to inject and no placeholder this task could carry: the head stays as it is.
  const broker::PlaceholderSet* placeholders = injector.placeholders();
  if (decision.credential.empty() && (!placeholders || placeholders->all().empty())) {
    return sent();
  }

  std::string target(req.target());
  broker::Headers hs = toBrokerHeaders(req);
  broker::OutgoingRequest out{host, tls, &hs, &target};
  // Checks first, then edits: a refused request is left untouched.
  auto inj = injector.apply(out, decision.credential);
  rec.credential = inj.credential;
  auto* tm = c_.metrics.get();
  if (!inj.ok()) {
    wipeAll(hs);
    broker::wipe(target);
    if (tm && !inj.credential.empty()) {
      tm->credentialInjection(inj.credential, inj.reason, how(inj));
    }
    if (inj.reason == broker::reason::kCredentialHostMismatch ||
        inj.reason == broker::reason::kPlaceholderMisplaced) {
      // The sandbox tried to send a credential (or its placeholder) where it must never go.
      spdlog::warn("task {}: possible exfiltration attempt refused: {}", task.name, inj.detail);
      // And in the audit line, which a deny does not otherwise give an error.
      rec.error = inj.reason == broker::reason::kPlaceholderMisplaced
                      ? inj.detail
                      : "possible exfiltration attempt: " + inj.detail;
    }
    const int status = inj.reason == broker::reason::kCredentialUnavailable ? 502 : 403;
    return Refusal{.status = status,
                   .reason = inj.reason,
                   .task = task.name,
                   .host = rec.host,
                   .rule = decision.rule,
                   .detail = inj.detail,
                   .outcome = status == 502 ? Outcome::kError : Outcome::kDeny};
  }
  if (inj.injected && echoesTheRequest(req.method_string())) {
    // TRACE (and TRACK) answer with the request as the upstream received it: the credential
    // would come back to the sandbox in the body. Refused whatever the rule's methods say.
    wipeAll(hs);
    broker::wipe(target);
    return Refusal{.status = 405,
                   .reason = reason::kTraceWithCredential,
                   .task = task.name,
                   .host = rec.host,
                   .rule = decision.rule,
                   .detail = fmt::format("{} echoes the request, and this one would carry "
                                         "credential {}",
                                         std::string_view(req.method_string()), inj.credential),
                   .hint = "send it with another method"};
  }
  rec.injected = inj.injected;
  // Every secret that goes out is counted once: how says whether the sandbox's placeholder
  // stood in its place or sandgate added it.
  if (tm && inj.injected) tm->credentialInjection(inj.credential, "ok", how(inj));
  if (!inj.injected) {
    // No credential: nothing was injected and no placeholder found; the head is unchanged.
    wipeAll(hs);
    broker::wipe(target);
    return sent();
  }
  replaceFields(req, hs);
  req.target(target);
  broker::wipe(target);
  // Scrubbing needs identity bodies: no compressed response may hide a secret. (Without the
  // field any coding would be acceptable: RFC 9110, section 12.5.3.)
  req.set(http::field::accept_encoding, "identity");
  // The secret as it went out stays scrubbed on this connection even once the store has a
  // newer one (a rotation between this request and its response).
  for (auto& rule : inj.scrub) {
    const size_t before = injectedRules_.size();
    broker::addScrubRule(injectedRules_, std::move(rule));
    if (injectedRules_.size() != before) scrubSet_.reset();
  }
  return std::nullopt;
}

broker::Injector* RequestCredentials::injector() {
  const auto& snap = *c_.snap;
  if (!injector_ && snap.secrets) {
    injector_.emplace(snap.secrets, snap.config.credentials, placeholders(), c_.task->name);
  }
  return injector_ ? &*injector_ : nullptr;
}

std::shared_ptr<const broker::PlaceholderSet> RequestCredentials::placeholders() const {
  // A run's listeners carry the run's own; serve's listeners serve token clients, whose
  // placeholders are their task's.
  if (c_.listener && c_.listener->placeholders) return c_.listener->placeholders;
  const auto& snap = *c_.snap;
  if (!c_.state.interception || !snap.secrets) return nullptr;
  return c_.state.tokenPlaceholders.forTask(c_.task->seriesName(), snap.config.credentials,
                                            *snap.secrets);
}

std::shared_ptr<const broker::ScrubSet> RequestCredentials::scrubSet() {
  const TaskEntry& task = *c_.task;
  std::shared_ptr<const std::vector<broker::SecretForm>> forms;
  if (task.secrets && !task.secrets->empty()) forms = task.secrets->current();
  if (scrubSet_ && forms == taskForms_) return scrubSet_;
  // Compiled again only when a secret of the task changed or a new one went out here.
  taskForms_ = forms;
  const broker::Injector* inj = injector();
  const broker::PlaceholderSet* shown = inj ? inj->placeholders() : nullptr;
  // The task's set, shared between its connections, when every secret sent here is one of the
  // task's forms with the same replacement (no rotation between the request and now): the
  // result would be the same set, and compiling it costs more the more secrets there are.
  if (forms && inj) {
    const auto shownPtr = placeholders();
    bool covered = shownPtr.get() == shown;
    if (covered && !injectedRules_.empty()) {
      std::vector<broker::ScrubRule> base;
      for (const auto& form : *forms) broker::addScrubRule(base, broker::scrubRuleFor(form, shown));
      for (const auto& sent : injectedRules_) {
        // reveal(): compared in constant time with another secret held by this process.
        covered = covered && std::any_of(base.begin(), base.end(), [&](const auto& r) {
                    return r.needle->equals(sent.needle->reveal()) &&
                           r.replacement == sent.replacement && (r.urlForms || !sent.urlForms) &&
                           (r.encodedForms || !sent.encodedForms);
                  });
      }
    }
    if (covered) {
      scrubSet_ = task.secrets->compiledFor(forms, shownPtr);
      return scrubSet_;
    }
  }
  std::vector<broker::ScrubRule> rules = injectedRules_;
  if (forms) {
    for (const auto& form : *forms) broker::addScrubRule(rules, broker::scrubRuleFor(form, shown));
  }
  scrubSet_ = std::make_shared<const broker::ScrubSet>(std::move(rules));
  return scrubSet_;
}

std::optional<Refusal> RequestCredentials::scrubHeaders(
    http::fields& res, bool hasBody, const RequestLog& log,
    std::optional<broker::Scrubber>& scrubber, std::unique_ptr<broker::BodyDecoder>& decoder) {
  auto set = scrubSet();
  if (set->empty()) return std::nullopt;
  scrubber.emplace(std::move(set));
  // Asked for identity and answered otherwise: the body's bytes are not the content, so a
  // secret echoed in it could not be found as it is. A single gzip or deflate layer, as a
  // content coding or as a transfer coding before chunked, is undone on the way (the client
  // gets the identity body it asked for); anything else is refused.
  std::vector<ResponseCoding> codings;
  if (hasBody) codings = responseCodings(res);
  if (!codings.empty()) {
    if (codings.size() == 1) decoder = broker::BodyDecoder::forCoding(codings[0].name);
    if (!decoder) {
      const std::string what =
          codings.size() == 1
              ? fmt::format("{} {}", codings[0].field, registeredName(codings[0].name))
              : fmt::format("{} codings one upon another", codings.size());
      const auto& rec = log.record;
      return Refusal{
          .status = 502,
          .reason = reason::kResponseNotScrubbable,
          .task = c_.task->name,
          .host = rec.host,
          .rule = rec.rule,
          .detail = fmt::format("the upstream answered with {}, which sandgate cannot decode to "
                                "scrub it for the secrets this task can reach",
                                what),
          .hint = "the upstream should honour Accept-Encoding: identity (or send gzip)",
          .outcome = Outcome::kError};
    }
    if (codings[0].field == "Content-Encoding") {
      // A strong validator names the encoded bytes, which the client does not get: the
      // decoded body is only semantically the same (RFC 9110, 8.8.1).
      if (auto etag = res.find(http::field::etag);
          etag != res.end() && !etag->value().starts_with("W/")) {
        res.set(http::field::etag, "W/" + std::string(etag->value()));
      }
    }
    // The body is framed anew (frameResponse): chunked, or ended by the close.
    res.erase(http::field::content_encoding);
    res.erase(http::field::transfer_encoding);
    res.erase(http::field::content_length);
  }
  const bool echoed = std::any_of(res.begin(), res.end(), [&](const auto& f) {
    return scrubber->occursIn(f.name_string()) || scrubber->occursIn(f.value());
  });
  if (!echoed) return std::nullopt;  // nothing to replace: the fields are not copied out and back
  broker::Headers rh = toBrokerHeaders(res);
  if (scrubber->scrubHeaders(rh) > 0) {
    replaceFields(res, rh);
  } else {
    wipeAll(rh);
  }
  return std::nullopt;
}

void RequestCredentials::countScrubs(const std::optional<broker::Scrubber>& scrubber) const {
  auto* tm = c_.metrics.get();
  if (scrubber && scrubber->count() > 0 && tm) {
    for (const auto& [credential, n] : scrubber->countByCredential()) {
      tm->secretScrubs(credential, n);
    }
  }
}

}  // namespace sandgate::proxy
