// Reading an LLM API request body (see llm_request.h).
#include "budget/llm_request.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cmath>
#include <set>
#include <vector>

namespace sandgate::budget {

namespace json = boost::json;

namespace {

// A SAX handler that only checks the shape: no key twice in one object, nesting bounded.
// Boost.JSON's own parse keeps the last of two equal keys silently; a provider may keep the
// first, so a request could be judged on one model and served another.
struct ShapeHandler {
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  std::vector<std::set<std::string>> objects;  // keys seen in each open object
  std::string key;                             // the key being read
  std::string duplicate;
  bool nonFinite = false;  // a number read as NaN or infinity
  int depth = 0;

  bool open(json::error_code& ec) {
    if (++depth > kMaxJsonDepth) {
      ec = json::error::too_deep;
      return false;
    }
    return true;
  }
  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code& ec) {
    objects.emplace_back();
    return open(ec);
  }
  bool on_object_end(std::size_t, json::error_code&) {
    objects.pop_back();
    --depth;
    return true;
  }
  bool on_array_begin(json::error_code& ec) { return open(ec); }
  bool on_array_end(std::size_t, json::error_code&) {
    --depth;
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    key.append(s.data(), s.size());
    if (!objects.back().insert(key).second) {
      duplicate = key.substr(0, 64);
      ec = json::error::syntax;  // stop here; `duplicate` says why
      return false;
    }
    key.clear();
    return true;
  }
  bool on_string_part(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_string(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t, json::string_view, json::error_code&) { return true; }
  bool on_uint64(std::uint64_t, json::string_view, json::error_code&) { return true; }
  bool on_double(double d, json::string_view, json::error_code& ec) {
    if (std::isfinite(d)) return true;
    nonFinite = true;
    ec = json::error::syntax;  // stop here; `nonFinite` says why
    return false;
  }
  bool on_bool(bool, json::error_code&) { return true; }
  bool on_null(json::error_code&) { return true; }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

// A whole number in [1, kMaxLlmTokens]; nullopt with `why` otherwise (1.5, 1e3, -1, "5").
std::optional<uint64_t> tokenCount(const json::value& v, std::string_view key, std::string& why) {
  std::optional<uint64_t> n;
  if (v.is_uint64()) n = v.as_uint64();
  if (v.is_int64() && v.as_int64() >= 0) n = static_cast<uint64_t>(v.as_int64());
  if (!n || *n < 1 || *n > kMaxLlmTokens) {
    why = fmt::format("`{}` is not a whole number from 1 to {}", key, kMaxLlmTokens);
    return std::nullopt;
  }
  return n;
}

}  // namespace

LlmRequestRead readLlmRequest(LlmApi api, std::string_view body) {
  LlmRequestRead out;
  {
    json::basic_parser<ShapeHandler> shape{json::parse_options{}};
    json::error_code ec;
    const size_t used = shape.write_some(false, body.data(), body.size(), ec);
    // One document and nothing after it: a second object is a second reading.
    if (!ec && body.substr(used).find_first_not_of(" \t\r\n") != std::string_view::npos) {
      ec = json::error::extra_data;
    }
    if (!shape.handler().duplicate.empty()) {
      out.problem = fmt::format("the request body names the key `{}` twice in one object",
                                shape.handler().duplicate);
      return out;
    }
    if (shape.handler().nonFinite) {
      // Readers disagree on such a number (Boost.JSON: 0e7512 is NaN, Python: 0.0), so the
      // body could be read two ways: refused, as a duplicate key is.
      out.problem = "the request body holds a number out of range (read as NaN or infinity)";
      return out;
    }
    if (ec) {
      out.problem = ec == json::error::too_deep
                        ? fmt::format("the request body nests deeper than {}", kMaxJsonDepth)
                        : "the request body is not JSON";
      return out;
    }
  }
  json::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) {
    out.problem = "the request body is not a JSON object";
    return out;
  }
  const json::object& o = v.as_object();
  LlmRequest r;
  const json::value* model = o.if_contains("model");
  if (!model || !model->is_string() || model->as_string().empty()) {
    out.problem = "the request names no model (a string `model`)";
    return out;
  }
  const json::string& m = model->as_string();
  if (m.size() > kMaxModelBytes) {
    out.problem = fmt::format("the model name is longer than {} bytes", kMaxModelBytes);
    return out;
  }
  for (char c : m) {
    // Printable ASCII: a control or non-ASCII byte could read as another model to a person
    // (or a log) than to the provider.
    if (c < 0x21 || c > 0x7e) {
      out.problem = "the model name holds a byte that is not printable ASCII";
      return out;
    }
  }
  r.model = std::string(m);
  std::string why;
  auto count = [&](std::string_view key) -> std::optional<std::optional<uint64_t>> {
    const json::value* x = o.if_contains(json::string_view(key.data(), key.size()));
    if (!x) return std::optional<uint64_t>{};
    if (api == LlmApi::kOpenai && x->is_null()) return std::optional<uint64_t>{};
    auto n = tokenCount(*x, key, why);
    if (!n) return std::nullopt;
    return n;
  };
  const char* keys[] = {"max_completion_tokens", "max_tokens", "max_output_tokens"};
  if (api == LlmApi::kAnthropic) {
    auto n = count("max_tokens");
    if (!n) {
      out.problem = why;
      return out;
    }
    r.maxTokens = *n;
  } else {
    // Two of them would leave the provider to choose: refused, like a repeated key.
    int named = 0;
    for (const char* k : keys) {
      auto n = count(k);
      if (!n) {
        out.problem = why;
        return out;
      }
      if (*n) {
        ++named;
        r.maxTokens = *n;
      }
    }
    if (named > 1) {
      out.problem =
          "the request names more than one of max_completion_tokens, max_tokens, "
          "max_output_tokens";
      return out;
    }
  }
  if (const json::value* s = o.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) {
      out.problem = "`stream` is not true or false";
      return out;
    }
    r.stream = s->as_bool();
  }
  if (const json::value* so = o.if_contains("stream_options"); so && so->is_object()) {
    if (const json::value* iu = so->as_object().if_contains("include_usage")) {
      if (!iu->is_bool()) {
        out.problem = "`stream_options.include_usage` is not true or false";
        return out;
      }
      r.includeUsage = iu->as_bool();
    }
  }
  out.request = std::move(r);
  return out;
}

}  // namespace sandgate::budget
