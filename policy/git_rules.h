// Git's smart HTTP under a rule's `git:` block: which requests are Git requests, which
// repository they name, and whether a fetch or each command of a push may pass. Pure: the
// proxy reads the bytes (proxy/exchange/git_gate.h), this file decides.
#pragma once

#include <re2/re2.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "policy/git_protocol.h"

namespace sandgate::policy {

// The Git reason tokens. A refused push is answered in Git's own report-status (so that
// `git push` prints the token); fetches and unparsable pushes get an ordinary refusal.
namespace reason {
inline constexpr std::string_view kGitRepositoryNotAllowed = "git_repository_not_allowed";
inline constexpr std::string_view kGitFetchNotAllowed = "git_fetch_not_allowed";
inline constexpr std::string_view kGitRefNotAllowed = "git_ref_not_allowed";
inline constexpr std::string_view kGitRefDeleteNotAllowed = "git_ref_delete_not_allowed";
inline constexpr std::string_view kGitTagNotAllowed = "git_tag_not_allowed";
inline constexpr std::string_view kGitProtocolError = "git_protocol_error";
inline constexpr std::string_view kGitArchiveNotAllowed = "git_archive_not_allowed";
}  // namespace reason

struct GitReasonInfo {
  std::string_view token;
  std::string_view status;  // what the client gets
  std::string_view meaning;
};

// The catalogue (README.md's "Refusals" table lists each).
inline constexpr GitReasonInfo kGitReasons[] = {
    {reason::kGitRepositoryNotAllowed, "403",
     "a Git request for a repository outside the rule's git.repositories"},
    {reason::kGitFetchNotAllowed, "403", "a clone or fetch under a rule with git.fetch: false"},
    {reason::kGitRefNotAllowed, "200 (report-status ng)",
     "a push to a ref outside git.push.refs (or with no git.push)"},
    {reason::kGitRefDeleteNotAllowed, "200 (report-status ng)",
     "a push deleting a ref, with git.push.delete false"},
    {reason::kGitTagNotAllowed, "200 (report-status ng)",
     "a push to refs/tags/*, with git.push.tags false"},
    {reason::kGitProtocolError, "400",
     "a receive-pack request whose command list does not parse (or is too long)"},
    {reason::kGitArchiveNotAllowed, "SSH exit 1",
     "git-upload-archive over SSH under a rule without git.archive: true"},
};

// Which smart-HTTP endpoint a request is for.
enum class GitService {
  kUploadPackAdvertisement,   // GET …/info/refs?service=git-upload-pack (or dumb info/refs)
  kReceivePackAdvertisement,  // GET …/info/refs?service=git-receive-pack
  kUploadPack,                // POST …/git-upload-pack (fetch, clone, ls-remote)
  kReceivePack,               // POST …/git-receive-pack (push)
  kDumb,     // GET …/HEAD, …/objects/…, …/objects/info/packs: the dumb protocol (a fetch)
  kArchive,  // GET …/archive/…, …/-/archive/…, …/zipball/…, …/tarball/… (a fetch)
};

struct GitRequest {
  GitService service;
  // The path before the endpoint, without the leading '/' and a trailing ".git", lower-cased
  // ("acme/widgets"). Empty when the endpoint is at the root.
  std::string repository;
  // The path had a percent-encoded byte: its repository is never matched (the forge may decode
  // it to another name than the one judged).
  bool encoded = false;
  bool isPush() const { return service == GitService::kReceivePack; }
};

// Recognises a Git request by its method, path (query excluded) and query; nullopt for anything
// else, which the rule decides as an ordinary request. The endpoint is found in the path as a
// lenient forge may route it: escapes decoded (repeatedly), '\\' as '/', ';params' and what
// follows a NUL cut from each segment, trailing dots and blanks trimmed, dot segments resolved,
// empty segments and case ignored. So "git%2Dreceive-pack", "Git-Receive-Pack/",
// "git-receive-pack;x", "git-receive-pack/.", "git-receive-pack%2F." are all judged as
// git-receive-pack, and any such spelling is marked `encoded` (its repository never matches).
// Git requests are the smart-HTTP endpoints, the dumb protocol's files (…/HEAD,
// …/objects/…, …/info/packs, …/objects/info/{packs,alternates,http-alternates}) and archive
// downloads (…/archive/…, …/-/archive/…, …/zipball/…, …/tarball/…); the repository is the
// path before them.
std::optional<GitRequest> classifyGitRequest(std::string_view method, std::string_view path,
                                             std::string_view query);

// The repository a path names, as the rules match it: without a leading or trailing '/', in
// lower case, and without a ".git" suffix or a "/.git" one (the git directory of a working
// tree, which git opens for the tree's own name). So "/Acme/Widgets.git", "acme/widgets/.git"
// and "acme/widgets.git/.git" are all "acme/widgets"; ".git" alone is "" (the root's).
std::string gitRepositoryName(std::string_view path);

// A `git:` block compiled: repository globs (case-insensitive, '*' within one segment, '**'
// across) and ref globs (case-sensitive, same wildcards).
class GitRules {
 public:
  // Diagnostics for bad globs carry `keyPath` (the rule's) + ".git…".
  static Result<std::shared_ptr<const GitRules>> compile(const config::GitRules& git,
                                                         const std::string& file,
                                                         const std::string& keyPath);

  struct Verdict {
    bool allowed = true;
    std::string_view reason;  // a reason:: token when refused
    std::string detail;       // one sentence
  };

  // Repository and fetch-level access for any Git request. Pushes also need decidePush().
  Verdict decideRequest(const GitRequest& req) const;
  // One command of a push.
  Verdict decideCommand(const PushCommand& cmd) const;

  bool fetch() const { return fetch_; }
  // git.archive: git-upload-archive (over SSH) may read the repository's trees.
  bool archive() const { return archive_; }
  const std::vector<std::string>& repositoryTexts() const { return repositoryTexts_; }
  const std::vector<std::string>& refTexts() const { return refTexts_; }

 private:
  bool fetch_ = true;
  bool archive_ = false;
  bool push_ = false;
  bool allowDelete_ = false;
  bool tags_ = false;
  std::vector<std::string> repositoryTexts_, refTexts_;
  std::unique_ptr<RE2> repositories_;  // null: none
  std::unique_ptr<RE2> refs_;          // null: none
};

// The decision on a whole push: each command's verdict, and whether any refused it.
struct PushDecision {
  std::vector<GitRules::Verdict> commands;  // one per PushCommands::commands, same order
  bool refused = false;
  std::string_view reason;  // the first refused command's
  std::string detail;       // the first refused command's
};
PushDecision decidePush(const GitRules& rules, const PushCommands& push);

}  // namespace sandgate::policy
