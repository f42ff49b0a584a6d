// proxy/observe/llm_metrics.cc: the sandgate_llm_* series take a model as a label only when the
// config names it (and at most TaskMetrics::kMaxModels per task), go away with their task's
// series, and the budget gauges are what the source answers at each scrape, no more.
#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <string>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {
namespace {

using namespace std::chrono;

// The value of the sample whose name and labels (as prometheus-cpp writes them, sorted by
// label name) are exactly `series`.
std::optional<double> sample(Metrics& m, const std::string& series) {
  std::istringstream in(m.render());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

TEST(LlmMetrics, AModelTheConfigDoesNotNameIsOther) {
  Metrics m(seconds(60));
  m.llmModels({"gpt-mini"});
  auto t = m.task("agent");
  t->llmCall("gpt-mini", "ok", 100, 200, 500000);
  t->llmCall("evil\"} 1\nsandgate_injected 1", "ok", 1, 2, 3);
  t->llmCall("gpt-mini-but-longer", "no_usage", 5, 6, 0);
  EXPECT_EQ(sample(m, R"(sandgate_llm_tokens_total{kind="input",model="gpt-mini",task="agent"})"),
            100);
  EXPECT_EQ(sample(m, R"(sandgate_llm_spend_total{model="gpt-mini",task="agent"})"), 0.5);
  EXPECT_EQ(sample(m, R"(sandgate_llm_tokens_total{kind="output",model="other",task="agent"})"), 8);
  EXPECT_EQ(sample(m, R"(sandgate_llm_calls_total{model="other",outcome="no_usage",task="agent"})"),
            1);
  EXPECT_EQ(m.render().find("evil"), std::string::npos);
  EXPECT_EQ(m.render().find("sandgate_injected"), std::string::npos);
  // An outcome outside the three is "other" too.
  t->llmCall("gpt-mini", "whatever", 0, 0, 0);
  EXPECT_EQ(sample(m, R"(sandgate_llm_calls_total{model="gpt-mini",outcome="other",task="agent"})"),
            1);
}

TEST(LlmMetrics, ModelLabelsPerTaskAreCappedAndFollowTheConfig) {
  Metrics m(seconds(60));
  std::set<std::string, std::less<>> many;
  for (size_t i = 0; i < TaskMetrics::kMaxModels + 5; ++i) many.insert("m" + std::to_string(i));
  m.llmModels(many);
  auto t = m.task("agent");
  for (const auto& model : many) t->llmCall(model, "ok", 1, 0, 0);
  const std::string page = m.render();
  size_t series = 0;
  for (size_t at = 0; (at = page.find("sandgate_llm_calls_total{", at)) != std::string::npos;
       ++at) {
    ++series;
  }
  EXPECT_EQ(series, TaskMetrics::kMaxModels + 1);  // and "other"
  EXPECT_EQ(sample(m, R"(sandgate_llm_calls_total{model="other",outcome="ok",task="agent"})"), 5);
  // A reload that drops a model: calls of it are "other" from then on.
  m.llmModels({});
  auto u = m.task("second");
  u->llmCall("m0", "ok", 1, 0, 0);
  EXPECT_EQ(sample(m, R"(sandgate_llm_calls_total{model="other",outcome="ok",task="second"})"), 1);
}

TEST(LlmMetrics, RefusalsAndTheirRemovalWithTheTask) {
  Metrics m(seconds(60));
  m.llmModels({"gpt-mini"});
  {
    auto t = m.task("agent");
    t->llmRefusal("budget_exceeded");
    t->llmRefusal("budget_exceeded");
    t->llmRefusal("Not A Token");
    t->llmCall("gpt-mini", "ok", 1, 1, 1);
  }
  EXPECT_EQ(sample(m, R"(sandgate_llm_refusals_total{reason="budget_exceeded",task="agent"})"), 2);
  EXPECT_EQ(sample(m, R"(sandgate_llm_refusals_total{reason="other",task="agent"})"), 1);
  const auto t0 = steady_clock::time_point() + hours(1000);
  m.sweep(t0);
  m.sweep(t0 + seconds(61));
  EXPECT_EQ(m.render().find("sandgate_llm_refusals_total{"), std::string::npos);
  EXPECT_EQ(m.render().find("sandgate_llm_tokens_total{"), std::string::npos);
}

TEST(LlmMetrics, BudgetGaugesAreTheSourcesAnswerAtEachScrape) {
  Metrics m(seconds(60));
  EXPECT_EQ(m.render().find("sandgate_budget_used{"), std::string::npos);
  std::vector<BudgetGauge> now = {{"agent", "daily", "day", "spend", 0.25, 1.0},
                                  {"agent", "calls", "run", "requests", 3, 10}};
  int scrapes = 0;
  m.budgetSource([&] {
    ++scrapes;
    return now;
  });
  EXPECT_EQ(
      sample(m, R"(sandgate_budget_used{budget="daily",metric="spend",task="agent",window="day"})"),
      0.25);
  EXPECT_EQ(
      sample(
          m,
          R"(sandgate_budget_limit{budget="calls",metric="requests",task="agent",window="run"})"),
      10);
  // A reload without the calls budget: its series go at the next scrape.
  now.pop_back();
  now[0].used = 0.5;
  const std::string page = m.render();
  EXPECT_EQ(page.find("budget=\"calls\""), std::string::npos);
  EXPECT_NE(
      page.find(
          R"(sandgate_budget_used{budget="daily",metric="spend",task="agent",window="day"} 0.5)"),
      std::string::npos);
  EXPECT_EQ(scrapes, 3);
  m.budgetSource({});
  EXPECT_EQ(m.render().find("sandgate_budget_used{"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::proxy
