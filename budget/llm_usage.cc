// Reading the usage an LLM API response reports (see llm_usage.h).
#include "budget/llm_usage.h"

#include <boost/json.hpp>

namespace sandgate::budget {

namespace json = boost::json;

namespace {

std::optional<uint64_t> count(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  if (!v) return std::nullopt;
  std::optional<uint64_t> n;
  if (v->is_uint64()) n = v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) n = static_cast<uint64_t>(v->as_int64());
  if (n && *n > kMaxUsageTokens) return std::nullopt;
  return n;
}

// OpenAI (Chat Completions: prompt_tokens, completion_tokens; Responses: input_tokens,
// output_tokens) and Anthropic (input_tokens plus the cache's, output_tokens). A usage object
// with a count that does not read is no usage at all: half of one would settle low.
std::optional<LlmUsage> usageObject(LlmApi api, const json::value& v, bool needOutput = true) {
  if (!v.is_object()) return std::nullopt;
  const json::object& u = v.as_object();
  LlmUsage out;
  if (api == LlmApi::kOpenai) {
    const bool chat = u.contains("prompt_tokens");
    auto in = count(u, chat ? "prompt_tokens" : "input_tokens");
    auto outTokens = count(u, chat ? "completion_tokens" : "output_tokens");
    if (!in || !outTokens) return std::nullopt;
    out.inputTokens = *in;
    out.outputTokens = *outTokens;
    return out;
  }
  auto in = count(u, "input_tokens");
  auto outTokens = count(u, "output_tokens");
  if (!in || (needOutput && !outTokens)) return std::nullopt;
  out.inputTokens = *in;
  for (const char* k : {"cache_creation_input_tokens", "cache_read_input_tokens"}) {
    if (u.contains(k)) {
      auto c = count(u, k);
      if (!c && !u.at(k).is_null()) return std::nullopt;
      if (c) out.inputTokens += *c;
    }
  }
  out.outputTokens = outTokens.value_or(0);
  return out;
}

}  // namespace

std::optional<LlmUsage> usageOfJson(LlmApi api, std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::value* u = v.as_object().if_contains("usage");
  if (!u) return std::nullopt;
  return usageObject(api, *u);
}

void SseUsage::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c != '\n') {
      if (line_.size() < kMaxEventBytes) {
        line_ += c;
      } else {
        skipping_ = true;
      }
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // the blank line that ends an event
      if (!skipping_ && !data_.empty()) event(data_);
      data_.clear();
      skipping_ = false;
    } else if (line_.starts_with("data:")) {
      std::string_view d = std::string_view(line_).substr(5);
      if (!d.empty() && d.front() == ' ') d.remove_prefix(1);
      if (data_.size() + d.size() + 1 > kMaxEventBytes) {
        skipping_ = true;
      } else {
        if (!data_.empty()) data_ += '\n';
        data_ += d;
      }
    }
    line_.clear();
  }
}

void SseUsage::event(std::string_view data) {
  if (data == "[DONE]") return;
  json::error_code ec;
  json::value v = json::parse(json::string_view(data.data(), data.size()), ec);
  if (ec || !v.is_object()) return;
  const json::object& o = v.as_object();
  if (api_ == LlmApi::kOpenai) {
    // The final chunk (stream_options.include_usage) has `usage`; the others have null.
    if (const json::value* u = o.if_contains("usage")) {
      if (auto got = usageObject(api_, *u)) {
        input_ = got->inputTokens;
        output_ = got->outputTokens;
      }
    }
    // The Responses API streams a response.completed event with the whole response.
    if (const json::value* r = o.if_contains("response"); r && r->is_object()) {
      if (const json::value* u = r->as_object().if_contains("usage")) {
        if (auto got = usageObject(api_, *u)) {
          input_ = got->inputTokens;
          output_ = got->outputTokens;
        }
      }
    }
    return;
  }
  const json::value* type = o.if_contains("type");
  if (!type || !type->is_string()) return;
  if (type->as_string() == "message_start") {
    const json::value* m = o.if_contains("message");
    if (!m || !m->is_object()) return;
    const json::value* u = m->as_object().if_contains("usage");
    if (!u) return;
    if (auto got = usageObject(api_, *u, false)) {
      input_ = got->inputTokens;
      if (u->as_object().contains("output_tokens")) output_ = got->outputTokens;
    }
  } else if (type->as_string() == "message_delta") {
    const json::value* u = o.if_contains("usage");
    if (!u || !u->is_object()) return;
    // Cumulative: the last delta's output_tokens is the message's.
    if (auto n = count(u->as_object(), "output_tokens")) {
      output_ = *n;
      delta_ = true;
    }
  }
}

std::optional<LlmUsage> SseUsage::usage() const {
  if (!input_ || !output_) return std::nullopt;
  return LlmUsage{*input_, *output_};
}

std::optional<LlmUsage> SseUsage::finalUsage() const {
  if (api_ == LlmApi::kAnthropic && !delta_) return std::nullopt;
  return usage();
}

}  // namespace sandgate::budget
