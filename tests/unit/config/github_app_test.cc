// Tests of source.github_app, inject.per_host and tasks[].repositories: what they read into,
// and that every mistake is refused with a message that says what to write instead.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::loadErrors;
using testing::loadOk;

// A github_app credential `gh` with `app` as the body of github_app (indented 8), `inject`
// as its inject line, and `tail` appended (tasks, policies).
std::string config(const std::string& app, const std::string& inject, const std::string& tail) {
  return "credentials:\n"
         "  gh:\n"
         "    source:\n"
         "      github_app:\n" +
         app +
         "    hosts: [github.com, api.github.com]\n"
         "    inject: " +
         inject + "\n" + tail;
}

const std::string kApp =
    "        app_id: 123456\n"
    "        private_key: { file: /run/secrets/app.pem }\n"
    "        installation_id: 7890\n"
    "        repositories: [widgets, tools-cli]\n"
    "        permissions: { contents: write, pull_requests: read }\n";
const std::string kPerHost =
    "{ per_host: { github.com: { basic: { username: x-access-token } }, api.github.com: "
    "{ bearer: {} } } }";
const std::string kPolicy =
    "policies:\n  p:\n    allow:\n      - host: github.com\n        credential: gh\n";

TEST(GithubAppConfig, ReadsTheSourcePerHostInjectionAndTaskRepositories) {
  auto cfg = loadOk(config(kApp + "        api: https://ghe.example.com/api/v3/\n", kPerHost,
                           kPolicy + "tasks:\n  - name: t1\n    policy: p\n"
                                     "    repositories: { gh: [Widgets] }\n"));
  const Credential& c = cfg.credentials.at("gh");
  ASSERT_EQ(c.source.kind, CredentialSource::Kind::kGithubApp);
  ASSERT_NE(c.source.githubApp, nullptr);
  const GithubApp& app = *c.source.githubApp;
  EXPECT_EQ(app.appId, 123456u);
  EXPECT_EQ(app.installationId, 7890u);
  EXPECT_EQ(app.privateKey.kind, CredentialSource::Kind::kFile);
  EXPECT_EQ(app.privateKey.file, "/run/secrets/app.pem");
  ASSERT_EQ(app.repositories.size(), 2u);
  EXPECT_EQ(app.repositories[1].value, "tools-cli");
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(app.permissions, (std::vector<P>{{"contents", "write"}, {"pull_requests", "read"}}));
  EXPECT_EQ(app.api, "https://ghe.example.com/api/v3");  // trailing slash dropped
  ASSERT_EQ(c.injectPerHost.size(), 2u);
  EXPECT_EQ(c.injectPerHost[0].host.value, "github.com");
  EXPECT_EQ(c.injectPerHost[0].inject.kind, Injection::Kind::kBasic);
  EXPECT_EQ(c.injectPerHost[0].inject.username, "x-access-token");
  EXPECT_EQ(c.injectPerHost[1].inject.kind, Injection::Kind::kHeader);
  EXPECT_EQ(c.injectPerHost[1].inject.header, "Authorization");
  EXPECT_EQ(c.injectPerHost[1].inject.value, "Bearer {secret}");
  ASSERT_EQ(cfg.tasks.size(), 1u);
  ASSERT_EQ(cfg.tasks[0].repositories.at("gh").size(), 1u);
  EXPECT_EQ(cfg.tasks[0].repositories.at("gh")[0].value, "Widgets");
  // The App key is hidden from sandboxes like any secret file.
  auto hidden = cfg.secretPaths();
  EXPECT_NE(std::find(hidden.begin(), hidden.end(), "/run/secrets/app.pem"), hidden.end());
}

TEST(GithubAppConfig, DefaultApiAndOtherKeySources) {
  auto cfg =
      loadOk(config("        app_id: 1\n"
                    "        private_key: { exec: [/usr/bin/get-key] }\n"
                    "        installation_id: 2\n"
                    "        repositories: [r]\n"
                    "        permissions: { contents: read }\n",
                    "{ basic: { username: x-access-token } }", ""));
  const GithubApp& app = *cfg.credentials.at("gh").source.githubApp;
  EXPECT_EQ(app.api, "https://api.github.com");
  EXPECT_EQ(app.privateKey.kind, CredentialSource::Kind::kExec);
  EXPECT_TRUE(cfg.credentials.at("gh").injectPerHost.empty());
}

struct BadCase {
  const char* name;
  std::string yaml;
  std::string keyPath;
  std::string message;
  size_t count = 1;  // diagnostics expected; the first is checked
};

TEST(GithubAppConfig, MistakesAreRefusedWithReasons) {
  const std::string perms = "        permissions: { contents: write }\n";
  const std::string head =
      "        app_id: 1\n        private_key: { file: /k.pem }\n        installation_id: 2\n";
  const BadCase cases[] = {
      {"no repositories", config(head + perms, kPerHost, ""), "credentials.gh.source.github_app",
       "missing required key `repositories`"},
      {"no permissions", config(head + "        repositories: [r]\n", kPerHost, ""),
       "credentials.gh.source.github_app", "missing required key `permissions`"},
      {"owner in a repository name",
       config(head + "        repositories: [acme/widgets]\n" + perms, kPerHost, ""),
       "credentials.gh.source.github_app.repositories[0]", "(`widgets`, not `acme/widgets`)"},
      {"a permission level GitHub does not have",
       config(head + "        repositories: [r]\n        permissions: { contents: all }\n",
              kPerHost, ""),
       "credentials.gh.source.github_app.permissions.contents", "expected read, write or admin"},
      {"api over plain http",
       config(head + "        repositories: [r]\n" + perms + "        api: http://api.github.com\n",
              kPerHost, ""),
       "credentials.gh.source.github_app.api", "expected the API's https:// URL"},
      {"app_id zero",
       config("        app_id: 0\n        private_key: { file: /k.pem }\n"
              "        installation_id: 2\n        repositories: [r]\n" +
                  perms,
              kPerHost, ""),
       "credentials.gh.source.github_app.app_id", ""},
      {"a github_app key source",
       config("        app_id: 1\n        private_key: { github_app: {} }\n"
              "        installation_id: 2\n        repositories: [r]\n" +
                  perms,
              kPerHost, ""),
       // and "expected exactly one of `file`, `env` or `exec`, got none"
       "credentials.gh.source.github_app.private_key.github_app", "unknown key `github_app`", 2},
      {"per_host names a host not in hosts",
       config(head + "        repositories: [r]\n" + perms,
              "{ per_host: { github.com: { basic: { username: x } }, api.github.com: { bearer: "
              "{} }, gist.github.com: { bearer: {} } } }",
              ""),
       "credentials.gh.inject.per_host[\"gist.github.com\"]",
       "is not one of this credential's hosts"},
      {"per_host leaves a host out",
       config(head + "        repositories: [r]\n" + perms,
              "{ per_host: { github.com: { basic: { username: x } } } }", ""),
       "credentials.gh.inject.per_host", "host `api.github.com` of this credential has no entry"},
      {"a task widens the set",
       config(head + "        repositories: [widgets]\n" + perms, kPerHost,
              kPolicy + "tasks:\n  - name: t1\n    policy: p\n"
                        "    repositories: { gh: [widgets, secret-repo] }\n"),
       "tasks[0].repositories.gh[1]", "`secret-repo` is not among credential `gh`'s repositories"},
      {"a task narrows a credential that is not minted",
       "credentials:\n  k:\n    source: { env: K }\n    hosts: [a.example]\n"
       "    inject: { bearer: {} }\n" +
           kPolicy.substr(0, kPolicy.find("credential")) + "\n" +
           "tasks:\n  - name: t1\n    policy: p\n    repositories: { k: [r] }\n",
       "tasks[0].repositories.k", "not a github_app source"},
      {"a task narrows an unknown credential",
       config(head + "        repositories: [r]\n" + perms, kPerHost,
              kPolicy + "tasks:\n  - name: t1\n    policy: p\n    repositories: { hg: [r] }\n"),
       "tasks[0].repositories.hg", "did you mean `gh`?"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto errors = loadErrors(c.yaml);
    ASSERT_EQ(errors.size(), c.count) << [&] {
      std::string all;
      for (const auto& d : errors) all += d.str() + "\n";
      return all;
    }();
    EXPECT_EQ(errors[0].keyPath, c.keyPath) << errors[0].str();
    EXPECT_NE(errors[0].message.find(c.message), std::string::npos) << errors[0].str();
  }
}

}  // namespace
}  // namespace sandgate::config
