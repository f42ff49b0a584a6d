// Reading the LLM parts of a config: top-level `llm: {prices}`, a rule's `llm:` block and the
// checks that join them to credentials and spend budgets. A spend budget is counted from
// prices, so a model it could be charged for without a price would be spend nobody counts:
// that is a config error here (and a refusal at run time for a model that slips past it).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "config/readers.h"

namespace sandgate::config {

namespace detail {

// The most output tokens a cap may name (budget::kMaxLlmTokens; config/ does not link budget/).
constexpr uint64_t kMaxCapTokens = (uint64_t{1} << 31) - 1;

namespace {

std::optional<uint64_t> readMicros(Reader& r, const Field& f, std::string_view what) {
  auto s = r.string(f, what);
  if (!s) return std::nullopt;
  auto v = parseMicros(s->value);
  if (!v) {
    r.error(f.mark, f.path,
            fmt::format("expected {} (a decimal such as 1.50, at most 6 decimals), got {}", what,
                        quoted(s->value)));
  }
  return v;
}

std::optional<LlmApi> readApi(Reader& r, const Field& f) {
  auto s = r.string(f, "openai or anthropic");
  if (!s) return std::nullopt;
  auto api = parseLlmApi(s->value);
  if (!api) {
    r.error(f.mark, f.path, fmt::format("expected openai or anthropic, got {}", quoted(s->value)));
  }
  return api;
}

}  // namespace

void readLlm(Reader& r, const Field& f, Llm& llm) {
  auto m = r.map(f, {"prices"}, "an llm section (a map with prices)");
  if (!m) return;
  const Field* p = m->get("prices");
  if (!p) return;
  auto pm = r.map(*p, {"currency", "models"}, "prices (a map with currency and models)");
  if (!pm) return;
  LlmPrices prices;
  prices.mark = p->keyMark;
  if (const Field* c = pm->get("currency")) {
    if (auto s = r.string(*c, "a currency code such as USD")) prices.currency = s->value;
  } else {
    r.missing(*p, "currency", "the currency prices and spend budgets are in, e.g. USD");
  }
  if (const Field* ms = pm->get("models")) {
    if (auto names = r.namedMap(*ms, "a map of model names to {input, output}", false)) {
      for (const auto& [name, body] : names->entries()) {
        auto bm = r.map(body, {"input", "output"},
                        "a model's prices per million tokens ({input: 0.50, output: 1.50})");
        if (!bm) continue;
        LlmPrice price;
        price.mark = body.keyMark;
        for (auto [key, out] : {std::pair{"input", &price.input}, {"output", &price.output}}) {
          if (const Field* v = bm->get(key)) {
            if (auto micros = readMicros(r, *v, "a price per million tokens")) {
              *out = static_cast<double>(*micros) / 1e6;
            }
          } else {
            r.missing(body, key, "the price per million tokens, e.g. 0.50");
          }
        }
        prices.models.emplace(name, price);
      }
    }
  } else {
    r.missing(*p, "models", "a map of model names to {input, output}");
  }
  llm.prices = std::move(prices);
}

std::optional<LlmRule> readLlmRule(Reader& r, const Field& f) {
  LlmRule rule;
  rule.mark = f.keyMark;
  if (f.node.IsScalar()) {  // `llm: openai`, as on a credential
    auto api = readApi(r, f);
    if (!api) return std::nullopt;
    rule.api = *api;
    return rule;
  }
  auto m = r.map(f, {"api", "models", "max_tokens"}, "an llm block ({api, models, max_tokens})");
  if (!m) return std::nullopt;
  if (const Field* a = m->get("api")) {
    if (auto api = readApi(r, *a)) rule.api = *api;
  } else {
    r.missing(f, "api", "openai or anthropic");
  }
  if (const Field* v = m->get("models")) {
    if (auto list = r.stringList(*v, "[gpt-mini]")) rule.models = std::move(*list);
  }
  if (const Field* v = m->get("max_tokens")) rule.maxTokens = r.integer(*v, 1, kMaxCapTokens);
  return rule;
}

std::optional<LlmApi> readCredentialLlm(Reader& r, const Field& f) { return readApi(r, f); }

void checkLlmReferences(Reader& r, const Config& cfg) {
  // The effective llm: of a rule: its own block, else its credential's `llm: <api>`.
  auto effective = [&](const Rule& rule) -> std::optional<LlmRule> {
    const Credential* cred = nullptr;
    if (rule.credential) {
      if (auto it = cfg.credentials.find(rule.credential->value); it != cfg.credentials.end()) {
        cred = &it->second;
      }
    }
    if (rule.llm && cred && cred->llm && *cred->llm != rule.llm->api) {
      r.error(rule.llm->mark, rule.keyPath + ".llm",
              fmt::format("the rule's llm api is {} but its credential `{}` says llm: {}",
                          llmApiName(rule.llm->api), cred->name, llmApiName(*cred->llm)));
    }
    if (rule.llm) return rule.llm;
    if (cred && cred->llm) return LlmRule{rule.mark, *cred->llm, {}, std::nullopt};
    return std::nullopt;
  };
  std::set<std::string, std::less<>> spendPolicies;
  auto hasSpend = [](const std::vector<Budget>& bs) {
    for (const auto& b : bs) {
      if (b.spendMicros) return &b;
    }
    return static_cast<const Budget*>(nullptr);
  };
  for (const auto& [name, p] : cfg.policies) {
    if (const Budget* b = hasSpend(p.budgets)) {
      spendPolicies.insert(name);
      if (!cfg.llm.prices) {
        r.error(b->mark, b->keyPath + ".spend", "a spend budget needs llm.prices");
      }
    }
  }
  for (const auto& t : cfg.tasks) {
    if (const Budget* b = hasSpend(t.budgets)) {
      spendPolicies.insert(t.policy.value);
      if (!cfg.llm.prices) {
        r.error(b->mark, b->keyPath + ".spend", "a spend budget needs llm.prices");
      }
    }
  }
  auto checkRules = [&](const std::vector<Rule>& rules, bool spend) {
    for (const auto& rule : rules) {
      auto llm = effective(rule);
      if (!llm || !spend || !cfg.llm.prices) continue;
      if (llm->models.empty()) {
        r.error(llm->mark, rule.keyPath + ".llm",
                "a task with a spend budget can reach this LLM rule: list its models "
                "(llm: {api, models: [...]}) so that each has a price");
      }
      for (const auto& model : llm->models) {
        if (!cfg.llm.prices->models.contains(model.value)) {
          r.error(model.mark, rule.keyPath + ".llm.models",
                  fmt::format("model `{}` has no price in llm.prices.models, and a task with a "
                              "spend budget can use it",
                              model.value));
        }
      }
    }
  };
  for (const auto& [name, p] : cfg.policies) {
    checkRules(p.allow, spendPolicies.contains(name));
  }
  checkRules(cfg.global.allow, !spendPolicies.empty());
}

}  // namespace detail
}  // namespace sandgate::config
