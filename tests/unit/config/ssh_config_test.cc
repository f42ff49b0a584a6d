// Tests of the SSH broker's config (issue #42): `ssh:` credentials, the top-level `ssh:` and
// a rule's `git.archive`, with their file:line:col errors.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

std::string credential(const std::string& body) { return "credentials:\n  deploy:\n" + body; }

const std::string kSource = "    source: {file: /etc/sandgate/keys/deploy_ed25519}\n";
const std::string kHosts = "    hosts: [git.example.com]\n";

TEST(SshConfig, CredentialNeedsNoInject) {
  auto cfg = loadOk(credential(kSource + kHosts +
                               "    ssh: {user: git, known_hosts: /etc/sandgate/known_hosts}\n"));
  const Credential& c = cfg.credentials.at("deploy");
  ASSERT_TRUE(c.ssh.has_value());
  EXPECT_EQ(c.ssh->user, "git");
  EXPECT_EQ(c.ssh->knownHosts, "/etc/sandgate/known_hosts");
  EXPECT_EQ(c.ssh->mark.line, 5);
  EXPECT_EQ(c.source.file, "/etc/sandgate/keys/deploy_ed25519");
  // The key file is hidden from sandboxes like any other secret.
  auto paths = cfg.secretPaths();
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/etc/sandgate/keys/deploy_ed25519"),
            paths.end());
}

TEST(SshConfig, CredentialErrors) {
  struct Case {
    const char* name;
    std::string body;
    Expected want;
  };
  const std::string ssh = "    ssh: {user: git, known_hosts: /k}\n";
  const Case cases[] = {
      {"inject and ssh",
       kSource + kHosts + ssh + "    inject: {header: X}\n",
       {6, 5, "credentials.deploy.inject", "`inject` conflicts with `ssh`"}},
      {"no user",
       kSource + kHosts + "    ssh: {known_hosts: /k}\n",
       {5, 5, "credentials.deploy.ssh", "missing required key `user`"}},
      {"no known_hosts",
       kSource + kHosts + "    ssh: {user: git}\n",
       {5, 5, "credentials.deploy.ssh", "missing required key `known_hosts`"}},
      {"user with a space",
       kSource + kHosts + "    ssh: {user: \"git x\", known_hosts: /k}\n",
       {5, 17, "credentials.deploy.ssh.user", "expected a user name"}},
      {"unknown key",
       kSource + kHosts + "    ssh: {user: git, known_hosts: /k, port: 22}\n",
       {5, 39, "credentials.deploy.ssh.port", "unknown key `port`"}},
      {"github_app source",
       "    source: {github_app: {app_id: 1, installation_id: 2, private_key: {file: /k}, "
       "repositories: [w], permissions: {contents: read}}}\n" +
           kHosts + ssh,
       {5, 5, "credentials.deploy.ssh", "`ssh` needs an OpenSSH private key source"}},
      {"no hosts", kSource + ssh, {2, 3, "credentials.deploy", "missing required key `hosts`"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(credential(c.body)), c.want);
  }
}

TEST(SshConfig, BrokerSection) {
  auto cfg = loadOk("ssh:\n  host_key: /etc/sandgate/ssh_host_ed25519_key\n"
                    "  max_sessions_per_task: 4\n");
  EXPECT_EQ(cfg.ssh.hostKey, "/etc/sandgate/ssh_host_ed25519_key");
  EXPECT_EQ(cfg.ssh.maxSessionsPerTask, 4u);
  auto paths = cfg.secretPaths();
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/etc/sandgate/ssh_host_ed25519_key"),
            paths.end());
  auto none = loadOk("listen: {proxy: \"127.0.0.1:3128\"}\n");
  EXPECT_FALSE(none.ssh.hostKey.has_value());
  EXPECT_EQ(none.ssh.maxSessionsPerTask, 16u);
  expectOne(loadErrors("ssh: {max_sessions_per_task: 0}\n"),
            {1, 30, "ssh.max_sessions_per_task", "expected an integer from 1 to 4096"});
  expectOne(loadErrors("ssh: {hostkey: /k}\n"),
            {1, 7, "ssh.hostkey", "unknown key `hostkey`; did you mean `host_key`?"});
}

TEST(SshConfig, GitArchive) {
  auto cfg = loadOk(
      "policies:\n  p:\n    allow:\n"
      "      - host: git.example.com\n        ports: [22]\n"
      "        git: {repositories: [acme/widgets], archive: true}\n");
  const Rule& rule = cfg.policies.at("p").allow.at(0);
  ASSERT_TRUE(rule.git.has_value());
  EXPECT_TRUE(rule.git->archive);
  EXPECT_TRUE(rule.git->fetch);
}

}  // namespace
}  // namespace sandgate::config
