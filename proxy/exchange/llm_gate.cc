// LLM calls read, judged, reserved and settled (see llm_gate.h).
#include "proxy/exchange/llm_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>

#include "budget/llm_error.h"
#include "budget/llm_request.h"
#include "common/http_text.h"
#include "proxy/exchange/body_peek.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {

bool hasSpendBudget(const ClientConnection& c) {
  if (!c.task) return false;
  return std::any_of(c.task->budgets.begin(), c.task->budgets.end(),
                     [](const config::Budget& b) { return b.spendMicros.has_value(); });
}

// The body with `stream_options.include_usage` set: the read already refused anything a
// second parser could read otherwise, so this parse sees the same document.
std::optional<std::string> withIncludeUsage(std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return std::nullopt;
  json::value& so = v.as_object()["stream_options"];
  if (!so.is_object()) so = json::object();
  so.as_object()["include_usage"] = true;
  return json::serialize(v);
}

// Whether the SSE event `text` is OpenAI's usage-only chunk: `choices` empty and `usage` set.
bool isUsageChunk(std::string_view text) {
  std::string data;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view line = text.substr(pos, end == std::string_view::npos ? text.npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("data:")) continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!data.empty()) data += '\n';
    data += line;
  }
  json::error_code ec;
  json::value v = json::parse(data, ec);
  if (ec || !v.is_object()) return false;
  const json::object& o = v.as_object();
  const json::value* choices = o.if_contains("choices");
  const json::value* usage = o.if_contains("usage");
  return choices && choices->is_array() && choices->as_array().empty() && usage &&
         usage->is_object();
}

// Where the SSE event at the start of `s` ends (after its blank line), or npos.
size_t eventEnd(std::string_view s) {
  const size_t lf = s.find("\n\n");
  const size_t crlf = s.find("\r\n\r\n");
  if (lf == s.npos && crlf == s.npos) return s.npos;
  if (crlf == s.npos || (lf != s.npos && lf < crlf)) return lf + 2;
  return crlf + 4;
}

}  // namespace

Refusal llmShaped(Refusal r, LlmApi api) {
  r.body = budget::llmErrorBody(api, r.status, r.reason, r.detail);
  return r;
}

asio::awaitable<LlmGateResult> readLlmCall(http::request_parser<http::buffer_body>& parser,
                                           beast::flat_buffer& in, const ClientConnection& c,
                                           const config::LlmRule& rule, const AuditRecord& rec,
                                           const GitReadSome& readSome, const GitWrite& write,
                                           bool& sentContinue) {
  auto& req = parser.get();
  const LlmApi api = rule.api;
  auto refuse = [&](int status, std::string_view reason, std::string detail) {
    Refusal r{.status = status,
              .reason = reason,
              .task = rec.task,
              .host = rec.host,
              .rule = rec.rule,
              .detail = std::move(detail)};
    return LlmGateResult{std::nullopt, llmShaped(std::move(r), api)};
  };
  // A compressed body would have to be inflated to be judged: a bomb, and a second reading.
  if (auto e = req.find(http::field::content_encoding);
      e != req.end() && !iequals(trimOws(e->value()), "identity")) {
    co_return refuse(415, reason::kLlmBodyEncoded,
                     "an LLM call's body must not be compressed (Content-Encoding), so that "
                     "sandgate can read its model and max tokens");
  }
  const auto announced = parser.content_length();
  if (announced && *announced > kMaxLlmBodyBytes) {
    co_return refuse(413, reason::kLlmBodyTooLarge,
                     fmt::format("an LLM call's body may have at most {} bytes", kMaxLlmBodyBytes));
  }
  std::string body;
  if (!parser.is_done()) {
    if (auto e = req.find(http::field::expect);
        e != req.end() && iequals(e->value(), "100-continue") && req.version() == 11) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      auto [ec, n] = co_await write(asio::buffer(kContinue.data(), kContinue.size()));
      if (ec) co_return refuse(400, reason::kLlmBodyUnreadable, "the client went away");
      sentContinue = true;
    }
    BodyPeek peek(parser, announced ? static_cast<size_t>(*announced) : kMaxLlmBodyBytes + 1);
    const size_t rawLimit = 2 * kMaxLlmBodyBytes + 4096;  // chunk framing around tiny chunks
    while (true) {
      const std::string_view wire(static_cast<const char*>(in.data().data()), in.data().size());
      if (!peek.feed(wire)) {
        co_return refuse(400, reason::kLlmBodyUnreadable, "the body's framing is malformed");
      }
      if (peek.done()) break;
      if (peek.decoded().size() > kMaxLlmBodyBytes || wire.size() >= rawLimit) {
        co_return refuse(
            413, reason::kLlmBodyTooLarge,
            fmt::format("an LLM call's body may have at most {} bytes", kMaxLlmBodyBytes));
      }
      auto [ec, n] =
          co_await readSome(in.prepare(std::min<size_t>(64 * 1024, rawLimit - wire.size())));
      in.commit(n);
      if (ec) co_return refuse(400, reason::kLlmBodyUnreadable, "the body ended early");
    }
    body.assign(peek.decoded());
    // The real parser takes the same wire bytes (its decoded copy is dropped): it ends done,
    // and the exchange sends the judged body in their place.
    std::array<char, 16 * 1024> scratch;
    auto& b = parser.get().body();
    while (!parser.is_done()) {
      b.data = scratch.data();
      b.size = scratch.size();
      beast::error_code ec;
      const size_t n = parser.put(in.data(), ec);
      in.consume(n);
      if (ec == http::error::need_buffer) ec = {};
      if (ec || (n == 0 && b.size == scratch.size())) {
        co_return refuse(400, reason::kLlmBodyUnreadable, "the body's framing is malformed");
      }
    }
  }
  if (body.size() > kMaxLlmBodyBytes) {
    co_return refuse(413, reason::kLlmBodyTooLarge,
                     fmt::format("an LLM call's body may have at most {} bytes", kMaxLlmBodyBytes));
  }
  auto read = budget::readLlmRequest(api, body);
  if (!read.request) {
    co_return refuse(400, reason::kLlmBodyUnreadable,
                     "sandgate cannot read this LLM call's body: " + read.problem);
  }
  const budget::LlmRequest& asked = *read.request;
  if (!rule.models.empty() && std::none_of(rule.models.begin(), rule.models.end(),
                                           [&](const auto& m) { return m.value == asked.model; })) {
    co_return refuse(403, reason::kModelNotAllowed,
                     fmt::format("model `{}` is not allowed here", asked.model));
  }
  LlmCall call;
  call.api = api;
  call.model = asked.model;
  call.stream = asked.stream;
  if (const auto& prices = c.snap->config.llm.prices) {
    if (auto it = prices->models.find(asked.model); it != prices->models.end()) {
      call.price = budget::ModelPrice{it->second.input, it->second.output};
    }
  }
  // Spend that cannot be priced would go uncounted: refused (the config check makes this rare:
  // a token's budgets claim or a rule without a model list can still reach it).
  if (!call.price && hasSpendBudget(c)) {
    co_return refuse(
        403, reason::kModelNotAllowed,
        fmt::format("model `{}` has no price, and this task has a spend budget", asked.model));
  }
  if (rule.maxTokens) {
    if (!asked.maxTokens) {
      co_return refuse(403, reason::kMaxTokensOverCap,
                       fmt::format("this call names no max tokens; set max_tokens (or "
                                   "max_completion_tokens) to at most {}",
                                   *rule.maxTokens));
    }
    if (*asked.maxTokens > *rule.maxTokens) {
      co_return refuse(
          403, reason::kMaxTokensOverCap,
          fmt::format("max tokens {} is over the cap of {}", *asked.maxTokens, *rule.maxTokens));
    }
  }
  if (api == LlmApi::kOpenai && asked.stream && !asked.includeUsage) {
    auto rewritten = withIncludeUsage(body);
    if (!rewritten) co_return refuse(400, reason::kLlmBodyUnreadable, "the body is not JSON");
    body = std::move(*rewritten);
    call.hideUsageChunk = true;
  }
  const uint64_t output =
      asked.maxTokens ? *asked.maxTokens : rule.maxTokens.value_or(kUncappedOutputReserve);
  const budget::LlmUsage worst = budget::worstCase(body.size(), output);
  call.reserve = budget::LlmCost{
      .inputTokens = static_cast<int64_t>(std::min<uint64_t>(worst.inputTokens, INT64_MAX)),
      .outputTokens = static_cast<int64_t>(std::min<uint64_t>(worst.outputTokens, INT64_MAX)),
      .spendMicros = call.price ? budget::spendMicros(worst, *call.price) : 0};
  // The upstream gets the judged body with a length of sandgate's, and answers uncompressed
  // (a compressed answer's usage could not be read, and the call would be settled at its
  // reserve).
  req.erase(http::field::transfer_encoding);
  req.erase(http::field::content_encoding);
  req.content_length(body.size());
  req.set(http::field::accept_encoding, "identity");
  call.body = std::move(body);
  co_return LlmGateResult{std::move(call), std::nullopt};
}

LlmMeter::LlmMeter(LlmCall call, BudgetGate& gate, AuditRecord& rec)
    : call_(std::move(call)), gate_(gate), rec_(rec) {}

LlmMeter::~LlmMeter() { settle(); }

void LlmMeter::responseStarted(int status, bool eventStream) {
  status_ = status;
  eventStream_ = eventStream;
  if (eventStream) sse_ = std::make_unique<budget::SseUsage>(call_.api);
}

void LlmMeter::pass(std::string_view in, bool last, std::string& out) {
  if (eventStream_) {
    sse_->feed(in);
    if (changesLength()) {
      filterEvents(in, last, out);
    } else {
      out.append(in);
    }
    return;
  }
  if (!jsonTooLong_) {
    if (json_.size() + in.size() > kMaxLlmBodyBytes) {
      jsonTooLong_ = true;
      json_.clear();
    } else {
      json_.append(in);
    }
  }
  out.append(in);
}

void LlmMeter::filterEvents(std::string_view in, bool last, std::string& out) {
  if (passThrough_) {
    out.append(in);
    return;
  }
  pending_.append(in);
  size_t start = 0;
  while (true) {
    const std::string_view rest = std::string_view(pending_).substr(start);
    const size_t end = eventEnd(rest);
    if (end == rest.npos) break;
    const std::string_view event = rest.substr(0, end);
    // The usage chunk was asked for by sandgate, not the client: it is read, not relayed.
    if (!isUsageChunk(event)) out.append(event);
    start += end;
  }
  pending_.erase(0, start);
  if (last || pending_.size() > budget::SseUsage::kMaxEventBytes) {
    // An event too long to hold goes as it comes (a usage chunk is small: this is not one).
    passThrough_ = !last;
    out.append(pending_);
    pending_.clear();
  }
}

void LlmMeter::settle() {
  if (settled_) return;
  settled_ = true;
  std::optional<budget::LlmUsage> usage;
  if (eventStream_) {
    usage = sse_->finalUsage();
  } else if (!jsonTooLong_ && !json_.empty()) {
    usage = budget::usageOfJson(call_.api, json_);
  }
  budget::LlmCost cost = call_.reserve;
  LlmAudit note{.model = call_.model};
  if (usage) {
    cost =
        budget::LlmCost{.inputTokens = static_cast<int64_t>(usage->inputTokens),
                        .outputTokens = static_cast<int64_t>(usage->outputTokens),
                        .spendMicros = call_.price ? budget::spendMicros(*usage, *call_.price) : 0};
    note.usage = "reported";
  } else if (status_ >= 400 || (status_ == 0 && !sent_)) {
    // No call ran: the upstream refused it (its error carries no usage), or never got it.
    cost = budget::LlmCost{};
    note.usage = "none";
  }
  gate_.settleLlm(cost);
  note.inputTokens = cost.inputTokens;
  note.outputTokens = cost.outputTokens;
  note.spendMicros = cost.spendMicros;
  rec_.llm = note;
}

}  // namespace sandgate::proxy
