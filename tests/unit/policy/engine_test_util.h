// Shared helpers for the policy engine tests: configs built as C++ structs (with marks, so
// that every decision and diagnostic can be checked for its file:line) and requests.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "policy/engine.h"

namespace sandgate::policy::policytest {

using config::Located;

// A rule as a test writes it; the key path is filled in by Cfg when the rule is added.
class R {
 public:
  explicit R(int line) : line_(line) { r_.mark = {line, 5}; }
  R& host(std::string h) {
    r_.host = Located<std::string>{std::move(h), {line_, 11}};
    return *this;
  }
  R& cidrs(std::initializer_list<const char*> v) {
    int col = 12;
    for (const char* c : v) r_.cidrs.push_back({c, {line_, col++}});
    return *this;
  }
  R& ports(std::initializer_list<uint16_t> v) {
    for (uint16_t p : v) r_.ports.push_back({p, {line_ + 1, 7}});
    return *this;
  }
  R& methods(std::initializer_list<const char*> v) {
    int col = 14;
    for (const char* m : v) r_.methods.push_back({m, {line_ + 2, col++}});
    return *this;
  }
  R& paths(std::initializer_list<const char*> v) {
    int col = 12;
    for (const char* p : v) r_.paths.push_back({p, {line_ + 3, col++}});
    return *this;
  }
  R& credential(std::string c) {
    r_.credential = Located<std::string>{std::move(c), {line_ + 4, 17}};
    return *this;
  }
  R& audit() {
    r_.mode = config::RuleMode::kAudit;
    return *this;
  }
  R& inspect() {
    r_.inspect = true;
    return *this;
  }
  config::Rule take(std::string keyPath) && {
    r_.keyPath = std::move(keyPath);
    return std::move(r_);
  }

 private:
  int line_;
  config::Rule r_;
};

// A config built in C++. Policy "global" stands for the `global:` section.
class Cfg {
 public:
  Cfg() { c_.file = "agent.yaml"; }
  Cfg& credential(const std::string& name) {
    c_.credentials[name].name = name;
    return *this;
  }
  Cfg& policy(const std::string& name, std::initializer_list<const char*> include = {}) {
    auto& p = c_.policies[name];
    p.name = name;
    for (const char* i : include) p.include.push_back({i, {1, 1}});
    return *this;
  }
  Cfg& allow(const std::string& policy, R r) { return add(policy, "allow", std::move(r)); }
  Cfg& deny(const std::string& policy, R r) { return add(policy, "deny", std::move(r)); }
  Cfg& task(const std::string& name, const std::string& policy) {
    config::Task t;
    t.name = name;
    t.policy = {policy, {90, 13}};
    c_.tasks.push_back(t);
    return *this;
  }
  const config::Config& config() const { return c_; }
  std::shared_ptr<const Engine> build() const {
    auto r = Engine::compile(c_);
    EXPECT_TRUE(r.ok()) << r.errorText();
    return r.ok() ? *r : nullptr;
  }
  Diagnostics errors() const {
    auto r = Engine::compile(c_);
    EXPECT_FALSE(r.ok());
    return r.errors();
  }

 private:
  Cfg& add(const std::string& policy, const std::string& list, R r) {
    std::vector<config::Rule>* rules;
    std::string prefix;
    if (policy == "global") {
      rules = list == "allow" ? &c_.global.allow : &c_.global.deny;
      prefix = "global." + list;
    } else {
      this->policy(policy);
      auto& p = c_.policies[policy];
      rules = list == "allow" ? &p.allow : &p.deny;
      prefix = "policies." + policy + "." + list;
    }
    std::string keyPath = prefix + "[" + std::to_string(rules->size()) + "]";
    rules->push_back(std::move(r).take(keyPath));
    return *this;
  }
  config::Config c_;
};

inline Target target(std::string_view host) {
  auto t = normalizeHost(host);
  EXPECT_TRUE(std::holds_alternative<Target>(t)) << host;
  return std::holds_alternative<Target>(t) ? std::get<Target>(t) : Target{};
}

// A CONNECT: method and path are not visible.
inline Request tunnel(std::string_view host, uint16_t port = 443) {
  Request r;
  r.target = target(host);
  r.port = port;
  return r;
}

// A visible request (plain HTTP, or inside an intercepted connection).
inline Request visible(std::string_view host, uint16_t port, std::string_view method,
                       std::string_view path) {
  Request r = tunnel(host, port);
  r.method = method;
  r.path = path;
  return r;
}

struct Case {
  const char* name;
  std::string task;
  Request req;
  Verdict verdict;
  std::string_view reason;
  std::string rule;  // "file:line", empty when no rule decided
};

inline void expectCases(const Engine& e, const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Decision d = e.decide(c.task, c.req);
    EXPECT_EQ(verdictName(d.verdict), verdictName(c.verdict)) << d.detail;
    EXPECT_EQ(d.reason, c.reason) << d.detail;
    EXPECT_EQ(d.rule, c.rule) << d.detail;
    EXPECT_FALSE(d.detail.empty());
    EXPECT_EQ(d.allowed(), c.verdict != Verdict::kDeny);
    if (!d.allowed()) {
      EXPECT_EQ(d.matched, nullptr);
      EXPECT_TRUE(d.credential.empty());
    }
  }
}

constexpr auto kAllow = Verdict::kAllow;
constexpr auto kDeny = Verdict::kDeny;
constexpr auto kAudit = Verdict::kAudit;

}  // namespace sandgate::policy::policytest
