// checkSources(): `sandgate policy lint --check-sources` (see source_check.h).
#include "broker/source_check.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "broker/source.h"

namespace sandgate::broker {
namespace {

using Kind = config::CredentialSource::Kind;

// Where posix_spawnp would find `name`: itself when it has a '/', else the first regular,
// executable file of that name in PATH (glibc's default when PATH is unset).
std::string findProgram(const std::string& name, std::string* why) {
  auto usable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0) {
      *why = fmt::format("the program {} does not exist", name);
    } else if (!S_ISREG(st.st_mode)) {
      *why = fmt::format("the program {} is not a regular file", name);
    } else if (::access(name.c_str(), X_OK) != 0) {
      *why = fmt::format("the program {} is not executable", name);
    } else {
      return name;
    }
    return {};
  }
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr ? env : "/bin:/usr/bin";
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    if (std::string candidate = dir + "/" + name; usable(candidate)) return candidate;
    start = end + 1;
  }
  *why = fmt::format("no executable program {} in PATH ({})", name, path);
  return {};
}

class Checker {
 public:
  explicit Checker(const config::Config& cfg) : cfg_(cfg) {}

  SourceChecks run() {
    for (const auto& [name, cred] : cfg_.credentials) {
      const std::string keyPath = fmt::format("credentials.{}.source", name);
      if (cred.source.kind == Kind::kGithubApp) {
        ++out_.notMinted;
        if (cred.source.githubApp) {
          check(cred, cred.source.githubApp->privateKey, keyPath + ".github_app.private_key", true);
        }
        continue;
      }
      check(cred, cred.source, keyPath, cred.ssh.has_value());
    }
    return std::move(out_);
  }

 private:
  void check(const config::Credential& cred, const config::CredentialSource& src,
             const std::string& keyPath, bool multiLine) {
    ++out_.checked;
    // Serve starts without an optional credential: its problem is worth a word, not a failure.
    auto problem = [&](const std::string& what) {
      std::string message = cred.optional ? fmt::format(
                                                "credential `{}` (optional: serve starts without "
                                                "it): {}",
                                                cred.name, what)
                                          : fmt::format("credential `{}`: {}", cred.name, what);
      (cred.optional ? out_.warnings : out_.errors)
          .push_back(Diagnostic{cfg_.file, src.mark.line, src.mark.col, keyPath, message});
    };
    switch (src.kind) {
      case Kind::kFile: {
        // The very read serve does (no watch needed for one look): its verdict, its words.
        FileSource file(src.file, multiLine);
        if (Fetched f = file.get(); !f.ok()) {
          problem(f.error);
          return;
        }
        struct stat st {};
        if (::stat(src.file.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
          // Anyone who can read the file holds the credential the sandboxes never see.
          out_.warnings.push_back(Diagnostic{
              cfg_.file, src.mark.line, src.mark.col, keyPath,
              fmt::format("credential `{}`: {} is readable by {} (mode {:04o}): make it 0600 "
                          "or 0400 (a Kubernetes Secret volume's 0440 with the pod's fsGroup "
                          "is its usual form)",
                          cred.name, src.file,
                          (st.st_mode & S_IROTH) != 0 ? "every user" : "its group",
                          st.st_mode & 07777)});
        }
        return;
      }
      case Kind::kEnv: {
        if (Fetched f = readEnv(src.env, multiLine); !f.ok()) problem(f.error);
        return;
      }
      case Kind::kExec: {
        ++out_.notRun;
        std::string why;
        if (src.exec.empty()) {
          problem("no command to run");
        } else if (findProgram(src.exec.front(), &why).empty()) {
          problem(why);
        }
        return;
      }
      case Kind::kGithubApp:
        return;  // not a key's source (the loader refuses one nested)
    }
  }

  const config::Config& cfg_;
  SourceChecks out_;
};

}  // namespace

SourceChecks checkSources(const config::Config& cfg) { return Checker(cfg).run(); }

}  // namespace sandgate::broker
