// Smart-HTTP classification, the compiled `git:` block and its decisions (see git_rules.h).
#include "policy/git_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace sandgate::policy {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}


std::optional<std::string_view> queryValue(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    if (pair.starts_with(key) && pair.size() > key.size() && pair[key.size()] == '=') {
      return pair.substr(key.size() + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// A glob of `git.repositories` or `git.push.refs` as RE2 source: '*' within one segment, '**'
// across segments. Characters are taken literally.
bool globToRegex(std::string_view glob, std::string* regex, std::string* error) {
  std::string out;
  for (size_t i = 0; i < glob.size();) {
    const char c = glob[i];
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '%' || c == '\\') {
      *error = fmt::format("\"{}\": character '{}' is not allowed here", glob, c);
      return false;
    }
    if (c != '*') {
      out += RE2::QuoteMeta(glob.substr(i, 1));
      ++i;
      continue;
    }
    size_t run = 0;
    while (i + run < glob.size() && glob[i + run] == '*') ++run;
    if (run > 2) {
      *error = fmt::format("\"{}\": use '*' (one segment) or '**' (any depth)", glob);
      return false;
    }
    out += run == 1 ? "[^/]*" : ".*";
    i += run;
  }
  *regex = std::move(out);
  return true;
}

bool hasDotSegment(std::string_view s) {
  size_t start = 0;
  while (start <= s.size()) {
    const size_t slash = s.find('/', start);
    const std::string_view seg =
        s.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return true;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return false;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

namespace {

// The segments a lenient forge may route `rawPath` by, lower-cased: escapes decoded (again
// while a decoded one remains, a bounded few times), '\\' read as '/', each segment cut at a
// ';' (servlet path parameters: Gerrit, Bitbucket Data Center, Gitblit and JGit drop them
// before routing) or a NUL, trailing dots and blanks trimmed (IIS and Windows trim them), '.'
// dropped, '..' resolved, empty segments dropped. `altered`: this form differs from the path as
// sent, so its repository is never matched (the forge may read another name).
std::vector<std::string> laxSegments(std::string_view rawPath, bool* altered) {
  std::string path(rawPath);
  for (int round = 0; round < 3 && path.find('%') != std::string::npos; ++round) {
    std::string decoded;
    decoded.reserve(path.size());
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '%' && i + 2 < path.size() && hexDigit(path[i + 1]) >= 0 &&
          hexDigit(path[i + 2]) >= 0) {
        decoded += static_cast<char>(hexDigit(path[i + 1]) * 16 + hexDigit(path[i + 2]));
        i += 2;
      } else {
        decoded += path[i];
      }
    }
    if (decoded == path) break;
    path = std::move(decoded);
  }
  std::replace(path.begin(), path.end(), '\\', '/');
  std::vector<std::string> segs;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    std::string seg =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    seg = seg.substr(0, seg.find_first_of(std::string_view(";\0", 2)));
    if (seg != "." && seg != "..") {
      while (!seg.empty() && (seg.back() == '.' || static_cast<unsigned char>(seg.back()) <= 0x20 ||
                              seg.back() == 0x7f)) {
        seg.pop_back();
      }
    }
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segs.push_back(lower(seg));
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::string rebuilt;
  for (const auto& seg : segs) {
    rebuilt += '/';
    rebuilt += seg;
  }
  const std::string_view asRouted = segs.empty() ? std::string_view("/") : rebuilt;
  *altered = asRouted != lower(rawPath);
  return segs;
}

std::string joinSegments(const std::vector<std::string>& segs, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "/" : "") + segs[i];
  return out;
}

}  // namespace

std::string gitRepositoryName(std::string_view path) {
  if (path.starts_with('/')) path.remove_prefix(1);
  if (path.ends_with('/')) path.remove_suffix(1);
  std::string out = lower(path);
  // "x/.git" is the git directory of the working tree x, and git opens it for "x" as well
  // (enter_repo tries "x/.git", "x", "x.git/.git", "x.git"): it is the repository x.
  if (out == ".git") return "";
  if (out.ends_with("/.git")) out.resize(out.size() - 5);
  // "x.git" is x, but "..git" is not ".": the suffix goes only when a plain name is left of
  // its segment.
  if (out.ends_with(".git")) {
    const size_t slash = out.rfind('/');
    const size_t start = slash == std::string::npos ? 0 : slash + 1;
    const std::string_view name = std::string_view(out).substr(start, out.size() - 4 - start);
    if (!name.empty() && name != "." && name != "..") out.resize(out.size() - 4);
  }
  return out;
}

std::optional<GitRequest> classifyGitRequest(std::string_view method, std::string_view rawPath,
                                             std::string_view query) {
  (void)method;  // the endpoint decides; git-http-backend itself refuses a wrong method
  bool altered = false;
  const std::vector<std::string> segs = laxSegments(rawPath, &altered);
  const size_t n = segs.size();
  // `encoded`: any '%' (as before), or a spelling that is not the path as a git client sends it.
  const bool encoded = altered || rawPath.find('%') != std::string_view::npos;
  auto make = [&](GitService service, size_t repoSegments) {
    return GitRequest{service, gitRepositoryName(joinSegments(segs, repoSegments)), encoded};
  };
  if (n == 0) return std::nullopt;
  const std::string& last = segs[n - 1];
  if (n >= 2 && segs[n - 2] == "info" && last == "refs") {
    const auto service = queryValue(query, "service");
    const bool push = service && *service == "git-receive-pack";
    return make(push ? GitService::kReceivePackAdvertisement : GitService::kUploadPackAdvertisement,
                n - 2);
  }
  if (last == "git-upload-pack") return make(GitService::kUploadPack, n - 1);
  if (last == "git-receive-pack") return make(GitService::kReceivePack, n - 1);
  // The dumb protocol: files of the repository itself, read with GET.
  if (last == "head") return make(GitService::kDumb, n - 1);
  if (n >= 2 && segs[n - 2] == "info" &&
      (last == "packs" || last == "alternates" || last == "http-alternates")) {
    const bool underObjects = n >= 3 && segs[n - 3] == "objects";
    return make(GitService::kDumb, n - (underObjects ? 3 : 2));
  }
  for (size_t i = n - 1; i-- > 0;) {
    if (segs[i] == "objects") return make(GitService::kDumb, i);
  }
  // Archive downloads on the forge's own host: GitHub's …/archive/…, GitLab's …/-/archive/….
  for (size_t i = 1; i < n; ++i) {
    if (segs[i] == "archive" || segs[i] == "zipball" || segs[i] == "tarball") {
      return make(GitService::kArchive, segs[i - 1] == "-" ? i - 1 : i);
    }
  }
  return std::nullopt;
}

Result<std::shared_ptr<const GitRules>> GitRules::compile(const config::GitRules& git,
                                                          const std::string& file,
                                                          const std::string& keyPath) {
  Diagnostics errors;
  auto error = [&](const config::Mark& m, std::string path, std::string message) {
    errors.push_back(Diagnostic{file, m.line, m.col, std::move(path), std::move(message)});
  };
  auto rules = std::make_shared<GitRules>();
  rules->fetch_ = git.fetch;
  rules->archive_ = git.archive;
  RE2::Options opts;
  opts.set_log_errors(false);
  std::string combined;
  for (size_t i = 0; i < git.repositories.size(); ++i) {
    const auto& item = git.repositories[i];
    const std::string path = fmt::format("{}.git.repositories[{}]", keyPath, i);
    std::string name = gitRepositoryName(item.value);
    std::string regex, why;
    if (name.empty() || item.value.starts_with('/') || hasDotSegment(name)) {
      error(item.mark, path,
            fmt::format("\"{}\": expected owner/name (no leading '/', no empty, '.' or '..' "
                        "segments)",
                        item.value));
    } else if (!globToRegex(name, &regex, &why)) {
      error(item.mark, path, why);
    } else {
      combined += (combined.empty() ? "(?:" : "|(?:") + regex + ")";
      rules->repositoryTexts_.push_back(item.value);
    }
  }
  if (!combined.empty()) rules->repositories_ = std::make_unique<RE2>(combined, opts);
  if (git.push) {
    rules->push_ = true;
    rules->allowDelete_ = git.push->allowDelete;
    rules->tags_ = git.push->tags;
    combined.clear();
    for (size_t i = 0; i < git.push->refs.size(); ++i) {
      const auto& item = git.push->refs[i];
      const std::string path = fmt::format("{}.git.push.refs[{}]", keyPath, i);
      std::string regex, why;
      if (!item.value.starts_with("refs/") || hasDotSegment(item.value)) {
        error(item.mark, path,
              fmt::format("\"{}\": a ref glob starts with refs/ (e.g. refs/heads/agent/*)",
                          item.value));
      } else if (!globToRegex(item.value, &regex, &why)) {
        error(item.mark, path, why);
      } else {
        combined += (combined.empty() ? "(?:" : "|(?:") + regex + ")";
        rules->refTexts_.push_back(item.value);
      }
    }
    if (!combined.empty()) rules->refs_ = std::make_unique<RE2>(combined, opts);
  }
  if ((rules->repositories_ && !rules->repositories_->ok()) ||
      (rules->refs_ && !rules->refs_->ok())) {
    error(git.mark, keyPath + ".git", "the globs do not compile together");
  }
  if (!errors.empty()) return errors;
  return std::shared_ptr<const GitRules>(std::move(rules));
}

GitRules::Verdict GitRules::decideRequest(const GitRequest& req) const {
  // An encoded or dotted name may be read as another repository by the forge than the one
  // matched here ("acme/widg%65ts", "acme/x/../secret").
  if (req.encoded || req.repository.find('%') != std::string::npos || req.repository.empty() ||
      hasDotSegment(req.repository)) {
    return {false, reason::kGitRepositoryNotAllowed,
            fmt::format("the repository path \"{}\" is percent-encoded, empty or has dot "
                        "segments, so it is never matched against git.repositories",
                        req.repository)};
  }
  if (!repositories_ || !RE2::FullMatch(req.repository, *repositories_)) {
    return {false, reason::kGitRepositoryNotAllowed,
            fmt::format("repository \"{}\" is not in git.repositories ({})", req.repository,
                        joined(repositoryTexts_))};
  }
  const bool fetching = req.service != GitService::kReceivePack &&
                        req.service != GitService::kReceivePackAdvertisement;
  if (fetching && !fetch_) {
    return {
        false, reason::kGitFetchNotAllowed,
        fmt::format("fetching from \"{}\" is not allowed (git.fetch is false)", req.repository)};
  }
  return {};
}

GitRules::Verdict GitRules::decideCommand(const PushCommand& cmd) const {
  if (cmd.ref.starts_with("refs/tags/")) {
    if (!push_ || !tags_) {
      return {false, reason::kGitTagNotAllowed,
              fmt::format("{}: pushing tags is not allowed (git.push.tags is false)", cmd.ref)};
    }
  } else if (!push_ || !refs_ || !RE2::FullMatch(cmd.ref, *refs_)) {
    return {false, reason::kGitRefNotAllowed,
            push_ ? fmt::format("{} is not in git.push.refs ({})", cmd.ref, joined(refTexts_))
                  : fmt::format("{}: the rule's git block allows no push (no git.push)", cmd.ref)};
  }
  if (cmd.isDelete() && !allowDelete_) {
    return {false, reason::kGitRefDeleteNotAllowed,
            fmt::format("{}: deleting a ref is not allowed (git.push.delete is false)", cmd.ref)};
  }
  return {};
}

PushDecision decidePush(const GitRules& rules, const PushCommands& push) {
  PushDecision out;
  for (const auto& cmd : push.commands) {
    out.commands.push_back(rules.decideCommand(cmd));
    const auto& v = out.commands.back();
    if (!v.allowed && !out.refused) {
      out.refused = true;
      out.reason = v.reason;
      out.detail = v.detail;
    }
  }
  return out;
}

}  // namespace sandgate::policy
