// Smart-HTTP classification, `git:` blocks compiled from YAML, and their decisions
// (policy/git_rules.h).
#include "policy/git_rules.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "policy/check.h"
#include "policy/engine.h"
#include "policy/host.h"

namespace sandgate::policy {
namespace {

Target parseTarget(std::string_view host) { return std::get<Target>(normalizeHost(host)); }

TEST(GitClassify, SmartHttpEndpointsAndTheirRepository) {
  struct Case {
    const char* method;
    const char* path;
    const char* query;
    GitService service;
    const char* repository;
  };
  const std::vector<Case> cases = {
      {"GET", "/acme/widgets.git/info/refs", "service=git-upload-pack",
       GitService::kUploadPackAdvertisement, "acme/widgets"},
      {"GET", "/acme/widgets/info/refs", "service=git-receive-pack",
       GitService::kReceivePackAdvertisement, "acme/widgets"},
      {"GET", "/Acme/Widgets.GIT/info/refs", "", GitService::kUploadPackAdvertisement,
       "acme/widgets"},
      {"POST", "/acme/widgets.git/git-upload-pack", "", GitService::kUploadPack, "acme/widgets"},
      {"POST", "/acme/widgets/git-receive-pack", "", GitService::kReceivePack, "acme/widgets"},
      {"POST", "/group/sub/project.git/git-receive-pack", "", GitService::kReceivePack,
       "group/sub/project"},
      {"GET", "/acme/w/info/refs", "x=1&service=git-receive-pack",
       GitService::kReceivePackAdvertisement, "acme/w"},
      {"POST", "/git-receive-pack", "", GitService::kReceivePack, ""},
      {"POST", "/acme/widgets/.git/git-upload-pack", "", GitService::kUploadPack, "acme/widgets"},
      {"POST", "/acme/widgets.git/.git/git-upload-pack", "", GitService::kUploadPack,
       "acme/widgets"},
      {"POST", "/.git/git-upload-pack", "", GitService::kUploadPack, ""},
  };
  for (const auto& c : cases) {
    auto g = classifyGitRequest(c.method, c.path, c.query);
    ASSERT_TRUE(g.has_value()) << c.path;
    EXPECT_EQ(g->service, c.service) << c.path;
    EXPECT_EQ(g->repository, c.repository) << c.path;
  }
  // Spellings a forge may still read as an endpoint are judged, not passed as ordinary paths;
  // an encoded one is marked, and its repository is never matched (RepositoriesForFetchAndPush).
  for (const char* spelled :
       {"/acme/widgets.git/git%2Dreceive-pack", "/acme/widgets.git/Git-Receive-Pack",
        "/acme/widgets.git/git-receive-pack/", "/acme/widgets.git/git-receive-pack//"}) {
    auto g = classifyGitRequest("POST", spelled, "");
    ASSERT_TRUE(g.has_value()) << spelled;
    EXPECT_EQ(g->service, GitService::kReceivePack) << spelled;
    EXPECT_EQ(g->repository, "acme/widgets") << spelled;
    // Any spelling but the one git sends is marked: its repository is never matched.
    EXPECT_EQ(g->encoded, std::string_view(spelled) != "/acme/widgets.git/Git-Receive-Pack");
  }
  for (const char* other : {"/acme/widgets", "/api/v3/repos", "/acme/widgets/git-receive-pack/x",
                            "/info/refsx", "/acme/widgets/blob/main/README.md"}) {
    EXPECT_FALSE(classifyGitRequest("GET", other, "").has_value()) << other;
  }
}

// Issue #38 item 1: each of these after the endpoint made the request "ordinary" (forwarded
// with the credential). A servlet forge drops ";params", others resolve dot segments, trim
// trailing dots and blanks, stop at a NUL or read '\' as '/': each is judged as the endpoint,
// and marked so that its repository never matches.
TEST(GitClassify, EverySpellingOfAnEndpointIsJudgedAsOne) {
  const char* suffixes[] = {
      ";x",     ";jsessionid=1", "/.",  "/x/..", ".",    "%20",       "%00", "\\",
      "%2F.",   "%2f.",          "%5C", "..;",   ";/",   "%3Bx",      "%09", ".%20.",
      "%252F.", "/./",           "//",  "%2e",   "/%2e", "/x/%2e%2e", "\\.", "%00.git",
  };
  struct Endpoint {
    const char* path;
    const char* query;
    GitService service;
  };
  const Endpoint endpoints[] = {
      {"/acme/secret.git/git-receive-pack", "", GitService::kReceivePack},
      {"/acme/secret.git/git-upload-pack", "", GitService::kUploadPack},
      {"/acme/secret.git/info/refs", "service=git-upload-pack",
       GitService::kUploadPackAdvertisement},
      {"/acme/secret.git/info/refs", "service=git-receive-pack",
       GitService::kReceivePackAdvertisement},
  };
  for (const auto& ep : endpoints) {
    for (const char* suffix : suffixes) {
      const std::string path = std::string(ep.path) + suffix;
      SCOPED_TRACE(path);
      auto g = classifyGitRequest("POST", path, ep.query);
      ASSERT_TRUE(g.has_value());
      EXPECT_EQ(g->service, ep.service);
      EXPECT_EQ(g->repository, "acme/secret");
      EXPECT_TRUE(g->encoded);
    }
  }
  // Inside the repository's part too: ";x" and dot segments before the endpoint.
  for (const char* path : {"/acme;x/secret/git-upload-pack", "/acme/x/../secret/git-upload-pack",
                           "/acme/./secret/git-upload-pack", "/acme\\secret/git-upload-pack"}) {
    auto g = classifyGitRequest("POST", path, "");
    ASSERT_TRUE(g.has_value()) << path;
    EXPECT_EQ(g->repository, "acme/secret") << path;
    EXPECT_TRUE(g->encoded) << path;
  }
}

// The dumb protocol and archive downloads are fetches of the repository before them.
TEST(GitClassify, DumbProtocolAndArchives) {
  struct Case {
    const char* path;
    GitService service;
    const char* repository;
  };
  const Case cases[] = {
      {"/acme/widgets.git/HEAD", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets.git/objects/ab/cdef0123", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets.git/objects/pack/pack-1.pack", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets.git/objects/info/packs", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets.git/objects/info/http-alternates", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets.git/info/packs", GitService::kDumb, "acme/widgets"},
      {"/acme/widgets/archive/refs/heads/main.zip", GitService::kArchive, "acme/widgets"},
      {"/acme/widgets/archive/main.tar.gz", GitService::kArchive, "acme/widgets"},
      {"/group/sub/widgets/-/archive/main/widgets-main.zip", GitService::kArchive,
       "group/sub/widgets"},
      {"/acme/widgets/zipball/main", GitService::kArchive, "acme/widgets"},
  };
  for (const auto& c : cases) {
    auto g = classifyGitRequest("GET", c.path, "");
    ASSERT_TRUE(g.has_value()) << c.path;
    EXPECT_EQ(g->service, c.service) << c.path;
    EXPECT_EQ(g->repository, c.repository) << c.path;
    EXPECT_FALSE(g->encoded) << c.path;
  }
}

// A config whose first allow rule has the `git:` block given as YAML (indented for the rule).
std::shared_ptr<const Engine> engineWith(const std::string& git, std::string* errors = nullptr) {
  const std::string yaml =
      "policies:\n"
      "  p:\n"
      "    allow:\n"
      "      - host: git.example.com\n"
      "        git:\n" +
      git +
      "      - host: other.example.com\n"
      "tasks:\n"
      "  - {name: t, policy: p}\n";
  auto cfg = config::loadString(yaml, "git.yaml");
  if (!cfg) {
    if (errors) *errors = cfg.errorText();
    return nullptr;
  }
  auto engine = Engine::compile(*cfg);
  if (!engine) {
    if (errors) *errors = engine.errorText();
    return nullptr;
  }
  return *engine;
}

const std::string kBlock =
    "          repositories: [acme/widgets, \"acme/tools-*\", \"Big/**\"]\n"
    "          push:\n"
    "            refs: [\"refs/heads/agent/*\", refs/heads/exact]\n";

Decision decideGit(const Engine& e, const char* method, const char* path) {
  return e.decide("t", Request{parseTarget("git.example.com"), 443, std::string_view(method),
                               std::string_view(path), std::nullopt});
}

TEST(GitRules, TheAdmittingRulesBlockTravelsWithTheDecision) {
  std::string err;
  auto e = engineWith(kBlock, &err);
  ASSERT_TRUE(e) << err;
  auto d = decideGit(*e, "POST", "/acme/widgets.git/git-receive-pack");
  ASSERT_TRUE(d.allowed());
  ASSERT_NE(d.git, nullptr);
  // A CONNECT to a host with a git rule is intercepted so that the requests can be judged.
  auto connect = e->decide(
      "t", Request{parseTarget("git.example.com"), 443, std::nullopt, std::nullopt, std::nullopt});
  EXPECT_TRUE(connect.intercept);
  EXPECT_NE(connect.git, nullptr);
  auto other = e->decide("t", Request{parseTarget("other.example.com"), 443, std::nullopt,
                                      std::nullopt, std::nullopt});
  EXPECT_EQ(other.git, nullptr);
  EXPECT_FALSE(other.intercept);
}

TEST(GitRules, RepositoriesForFetchAndPush) {
  auto e = engineWith(kBlock);
  ASSERT_TRUE(e);
  const GitRules& g = *decideGit(*e, "GET", "/x").git;
  struct Case {
    const char* path;
    bool allowed;
  };
  const std::vector<Case> cases = {
      {"/acme/widgets.git/info/refs", true},
      {"/ACME/Widgets/git-upload-pack", true},
      {"/acme/tools-cli.git/git-receive-pack", true},
      {"/acme/tools-cli/sub/git-upload-pack", false},  // '*' stays within one segment
      {"/big/a/b/c/git-upload-pack", true},            // '**' does not
      {"/acme/widgets2/git-upload-pack", false},
      {"/acme/secret.git/info/refs", false},
      // A working tree's git directory is the repository of the tree: judged by that name.
      {"/acme/widgets/.git/git-upload-pack", true},
      {"/acme/secret/.git/info/refs", false},
      {"/acme/widg%65ts/git-upload-pack", false},  // an encoded name is never matched
      {"/acme/widgets.git/git%2Dreceive-pack", false},
      {"/acme/x/../widgets/git-upload-pack", false},
      {"/git-upload-pack", false},
  };
  for (const auto& c : cases) {
    auto req = classifyGitRequest("POST", c.path, "");
    ASSERT_TRUE(req) << c.path;
    auto v = g.decideRequest(*req);
    EXPECT_EQ(v.allowed, c.allowed) << c.path;
    if (!c.allowed) {
      EXPECT_EQ(v.reason, reason::kGitRepositoryNotAllowed) << c.path;
      EXPECT_TRUE(v.detail.find("acme/widgets, acme/tools-*") != std::string::npos ||
                  v.detail.find("never matched") != std::string::npos)
          << v.detail;
    }
  }
}

// A fetch of a repository outside `repositories` by the dumb protocol or as an archive is
// refused like a clone; with git.fetch false, so is one of a listed repository.
TEST(GitRules, DumbFetchesAndArchivesAreFetches) {
  auto e = engineWith(kBlock);
  ASSERT_TRUE(e);
  const GitRules& g = *decideGit(*e, "GET", "/x").git;
  EXPECT_TRUE(g.decideRequest(*classifyGitRequest("GET", "/acme/widgets.git/HEAD", "")).allowed);
  for (const char* path : {"/acme/secret.git/HEAD", "/acme/secret.git/objects/info/packs",
                           "/acme/secret/archive/main.zip", "/acme/secret/-/archive/main/s.zip",
                           "/acme/secret.git/HEAD%2F."}) {
    auto v = g.decideRequest(*classifyGitRequest("GET", path, ""));
    EXPECT_FALSE(v.allowed) << path;
    EXPECT_EQ(v.reason, reason::kGitRepositoryNotAllowed) << path;
  }
  auto noFetch = engineWith(
      "          repositories: [acme/widgets]\n"
      "          fetch: false\n");
  ASSERT_TRUE(noFetch);
  const GitRules& nf = *decideGit(*noFetch, "GET", "/x").git;
  EXPECT_EQ(
      nf.decideRequest(*classifyGitRequest("GET", "/acme/widgets/archive/main.zip", "")).reason,
      reason::kGitFetchNotAllowed);
}

// On a host whose admitting rule has a git block, every path must be in normal form: a
// spelling of an endpoint the classifier might still miss is refused before the gate.
TEST(GitRules, APathNotInNormalFormIsRefusedOnAGitHost) {
  auto e = engineWith(kBlock);
  ASSERT_TRUE(e);
  for (const char* path :
       {"/acme/widgets.git/git-receive-pack;x", "/acme/widgets.git/git-receive-pack;jsessionid=1",
        "/acme/widgets.git/git-receive-pack/.", "/acme/widgets.git/git-receive-pack/x/..",
        "/acme/widgets.git/git-receive-pack.", "/acme/widgets.git/git-receive-pack%20",
        "/acme/widgets.git/git-receive-pack%00", "/acme/widgets.git/git-receive-pack\\",
        "/acme/widgets.git/git-receive-pack%2F.", "/acme/widgets.git/info/refs/.",
        "/anything/else;x"}) {
    SCOPED_TRACE(path);
    auto d = decideGit(*e, "POST", path);
    EXPECT_FALSE(d.allowed());
    EXPECT_EQ(d.reason, reason::kPathAmbiguous);
    EXPECT_EQ(d.rule, "git.yaml:4");
  }
  EXPECT_TRUE(decideGit(*e, "POST", "/acme/widgets.git/git-receive-pack").allowed());
  EXPECT_TRUE(decideGit(*e, "GET", "/acme/widgets/pulls").allowed());
  // A host without a git block still forwards such paths (no rule there judges the path).
  auto other =
      e->decide("t", Request{parseTarget("other.example.com"), 443, std::string_view("GET"),
                             std::string_view("/x;y/."), std::nullopt});
  EXPECT_TRUE(other.allowed());
}

TEST(GitRules, FetchFalseRefusesUploadPackButNotThePushAdvertisement) {
  auto e = engineWith("          repositories: [acme/widgets]\n          fetch: false\n");
  ASSERT_TRUE(e);
  const GitRules& g = *decideGit(*e, "GET", "/x").git;
  auto refs = g.decideRequest(
      *classifyGitRequest("GET", "/acme/widgets/info/refs", "service=git-upload-pack"));
  EXPECT_FALSE(refs.allowed);
  EXPECT_EQ(refs.reason, reason::kGitFetchNotAllowed);
  EXPECT_EQ(
      g.decideRequest(*classifyGitRequest("POST", "/acme/widgets/git-upload-pack", "")).reason,
      reason::kGitFetchNotAllowed);
  EXPECT_TRUE(g.decideRequest(*classifyGitRequest("GET", "/acme/widgets/info/refs",
                                                  "service=git-receive-pack"))
                  .allowed);
}

PushCommand command(const std::string& ref, bool del = false) {
  return PushCommand{std::string(40, 'a'), std::string(40, del ? '0' : 'b'), ref};
}

TEST(GitRules, EachPushCommandIsDecided) {
  auto withDeleteAndTags = engineWith(
      "          repositories: [acme/widgets]\n"
      "          push: {refs: [\"refs/heads/agent/*\"], delete: true, tags: true}\n");
  auto e = engineWith(kBlock);
  auto none = engineWith("          repositories: [acme/widgets]\n");
  ASSERT_TRUE(e && withDeleteAndTags && none);
  const GitRules& g = *decideGit(*e, "GET", "/x").git;
  const GitRules& open = *decideGit(*withDeleteAndTags, "GET", "/x").git;
  const GitRules& noPush = *decideGit(*none, "GET", "/x").git;
  struct Case {
    const char* name;
    const GitRules& rules;
    PushCommand cmd;
    std::string_view reason;  // empty: allowed
  };
  const std::vector<Case> cases = {
      {"allowed branch", g, command("refs/heads/agent/x"), {}},
      {"exact branch", g, command("refs/heads/exact"), {}},
      {"main", g, command("refs/heads/main"), reason::kGitRefNotAllowed},
      {"nested under agent/*", g, command("refs/heads/agent/a/b"), reason::kGitRefNotAllowed},
      {"case matters in refs", g, command("refs/heads/Agent/x"), reason::kGitRefNotAllowed},
      {"delete", g, command("refs/heads/agent/x", true), reason::kGitRefDeleteNotAllowed},
      {"delete of a refused ref", g, command("refs/heads/main", true), reason::kGitRefNotAllowed},
      {"tag", g, command("refs/tags/v1"), reason::kGitTagNotAllowed},
      {"not under refs/", g, command("HEAD"), reason::kGitRefNotAllowed},
      {"delete allowed", open, command("refs/heads/agent/x", true), {}},
      {"tag allowed", open, command("refs/tags/v1"), {}},
      {"tag delete allowed", open, command("refs/tags/v1", true), {}},
      {"no push block", noPush, command("refs/heads/agent/x"), reason::kGitRefNotAllowed},
      {"no push block, tag", noPush, command("refs/tags/v1"), reason::kGitTagNotAllowed},
  };
  for (const auto& c : cases) {
    auto v = c.rules.decideCommand(c.cmd);
    EXPECT_EQ(v.allowed, c.reason.empty()) << c.name;
    EXPECT_EQ(v.reason, c.reason) << c.name;
    if (!v.allowed) {
      EXPECT_NE(v.detail.find(c.cmd.ref), std::string::npos) << c.name << ": " << v.detail;
    }
  }
}

TEST(GitRules, APushWithOneRefusedRefIsRefusedAsAWhole) {
  auto e = engineWith(kBlock);
  ASSERT_TRUE(e);
  const GitRules& g = *decideGit(*e, "GET", "/x").git;
  PushCommands push;
  push.status = PushCommands::Status::kCommands;
  push.commands = {command("refs/heads/agent/x"), command("refs/heads/main"),
                   command("refs/tags/v1")};
  auto d = decidePush(g, push);
  EXPECT_TRUE(d.refused);
  EXPECT_EQ(d.reason, reason::kGitRefNotAllowed);  // the first refused command's
  ASSERT_EQ(d.commands.size(), 3u);
  EXPECT_TRUE(d.commands[0].allowed);
  EXPECT_EQ(d.commands[2].reason, reason::kGitTagNotAllowed);
  push.commands = {command("refs/heads/agent/x")};
  EXPECT_FALSE(decidePush(g, push).refused);
  push.commands.clear();
  EXPECT_FALSE(decidePush(g, push).refused);
}

TEST(GitRules, BadBlocksAreLoadErrorsWithTheirPosition) {
  struct Case {
    std::string git;
    std::string keyPath;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"          repositories: [\"/acme/x\"]\n", "policies.p.allow[0].git.repositories[0]",
       "expected owner/name"},
      {"          repositories: [\"acme/../x\"]\n", "policies.p.allow[0].git.repositories[0]",
       "expected owner/name"},
      {"          repositories: [\"acme/***\"]\n", "policies.p.allow[0].git.repositories[0]",
       "use '*'"},
      {"          repositories: [acme/x]\n          push: {refs: [heads/main]}\n",
       "policies.p.allow[0].git.push.refs[0]", "starts with refs/"},
      {"          repositories: [acme/x]\n          push: {refs: [\"refs/heads/a b\"]}\n",
       "policies.p.allow[0].git.push.refs[0]", "not allowed"},
      {"          fetch: true\n", "policies.p.allow[0].git", "missing required key `repositories`"},
      {"          repositories: [acme/x]\n          pushh: {}\n", "policies.p.allow[0].git.pushh",
       "unknown key"},
      {"          repositories: [acme/x]\n          push: {refs: [refs/heads/x], tags: yes}\n",
       "policies.p.allow[0].git.push.tags", ""},
  };
  for (const auto& c : cases) {
    std::string err;
    EXPECT_EQ(engineWith(c.git, &err), nullptr) << c.git;
    EXPECT_NE(err.find(c.keyPath), std::string::npos) << c.git << "\n" << err;
    EXPECT_NE(err.find(c.message), std::string::npos) << c.git << "\n" << err;
    EXPECT_NE(err.find("git.yaml:"), std::string::npos) << err;
  }
}

TEST(GitRules, ADenyRuleCannotHaveAGitBlock) {
  auto cfg = config::loadString(
      "policies:\n  p:\n    deny:\n      - host: a.example.com\n        git: {repositories: "
      "[x/y]}\n",
      "d.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.errorText().find("a deny rule cannot have a git block"), std::string::npos)
      << cfg.errorText();
}

TEST(GitCheck, APushOfOneRefToARepositoryUrl) {
  auto e = engineWith(kBlock);
  ASSERT_TRUE(e);
  auto cfg = config::loadString(
      "policies: {p: {allow: [{host: git.example.com}]}}\ntasks: [{name: t, policy: p}]\n", "x");
  ASSERT_TRUE(cfg);
  auto url = [](const char* u) { return std::get<CheckTarget>(parseCheckTarget(u)); };
  struct Case {
    const char* url;
    const char* ref;
    std::string_view reason;
  };
  const std::vector<Case> cases = {
      {"https://git.example.com/acme/widgets.git", "refs/heads/agent/x", reason::kAllowed},
      {"https://git.example.com/acme/widgets/", "refs/heads/agent/x", reason::kAllowed},
      {"https://git.example.com/acme/widgets.git", "refs/heads/main", reason::kGitRefNotAllowed},
      {"https://git.example.com/acme/widgets.git", ":refs/heads/agent/x",
       reason::kGitRefDeleteNotAllowed},
      {"https://git.example.com/acme/widgets.git", "refs/tags/v1", reason::kGitTagNotAllowed},
      {"https://git.example.com/acme/other.git", "refs/heads/agent/x",
       reason::kGitRepositoryNotAllowed},
      {"https://other.example.com/acme/widgets.git", "refs/heads/main", reason::kAllowed},
  };
  for (const auto& c : cases) {
    auto r = checkGitPush(*e, *cfg, "t", url(c.url), c.ref);
    EXPECT_EQ(r.decision.reason, c.reason) << c.url << " " << c.ref << ": " << r.decision.detail;
    EXPECT_EQ(r.decision.allowed(), c.reason == reason::kAllowed) << c.url << " " << c.ref;
  }
}

}  // namespace
}  // namespace sandgate::policy
