// Fuzzes what a git client sends the SSH broker before anything goes upstream (issue #42): the
// exec command (proxy/ssh/git_command.h) and the receive-pack command list read from the
// pkt-line stream (policy/git_protocol.h, shared with the HTTP git gate). The first byte picks
// which; the rest is the input. Beyond not crashing:
//  - an accepted exec command names a repository that the rules can see: its path holds only
//    [A-Za-z0-9._/-], no empty, '.', '..' or '-'-led segment; the repository is lower case with
//    no leading '/' and no trailing ".git" or "/.git" (a working tree's git directory); and
//    the command sent upstream, parsed again, is the same service and repository (what goes
//    upstream is what was judged);
//  - the command list judged is the one the upstream reads whatever the packets' split: every
//    prefix of the input parses as "need more" or as the same list with the same length (a
//    push whose list arrives a byte per packet is judged once, whole, never early on a part);
//    a list never ends past its limit or the input; refs hold no control bytes or spaces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/check.h"
#include "policy/git_protocol.h"
#include "proxy/ssh/git_command.h"

namespace {

namespace policy = sandgate::policy;
namespace ssh = sandgate::proxy::ssh;

bool pathByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '/' || c == '-';
}

void checkCommand(std::string_view input) {
  std::string why;
  auto cmd = ssh::parseGitCommand(input, &why);
  if (!cmd) {
    SANDGATE_FUZZ_CHECK(!why.empty(), "a refused command says why");
    return;
  }
  for (char c : cmd->path) SANDGATE_FUZZ_CHECK(pathByte(c), "an accepted path's bytes");
  const std::string& repo = cmd->repository;
  SANDGATE_FUZZ_CHECK(!repo.empty() && repo.front() != '/', "a repository without a root");
  // The repository is the path (without its leading and trailing '/') in lower case, less at
  // most one ".git" the client wrote: the name the rules match is the one the upstream opens.
  std::string_view bare = cmd->path;
  if (bare.starts_with('/')) bare.remove_prefix(1);
  if (bare.ends_with('/')) bare.remove_suffix(1);
  std::string lower(bare);
  for (char& c : lower) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  SANDGATE_FUZZ_CHECK(repo == lower || lower == repo + ".git" || lower == repo + "/.git" ||
                          lower == repo + ".git/.git",
                      "the repository is the path, less a .git suffix or a /.git directory");
  size_t start = 0;
  while (true) {
    const size_t slash = repo.find('/', start);
    const std::string_view seg = std::string_view(repo).substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    SANDGATE_FUZZ_CHECK(!seg.empty() && seg != "." && seg != ".." && seg.front() != '-',
                        "every segment of an accepted repository is a plain name");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  for (char c : repo) SANDGATE_FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "a lower-case repository");
  std::string again;
  auto upstream = ssh::parseGitCommand(cmd->upstreamCommand(), &again);
  SANDGATE_FUZZ_CHECK(upstream.has_value(), "the command sent upstream parses");
  SANDGATE_FUZZ_CHECK(upstream->service == cmd->service, "upstream runs the service judged");
  SANDGATE_FUZZ_CHECK(upstream->repository == repo, "upstream gets the repository judged");
}

bool sameCommands(const policy::PushCommands& a, const policy::PushCommands& b) {
  if (a.commands.size() != b.commands.size() || a.consumed != b.consumed) return false;
  for (size_t i = 0; i < a.commands.size(); ++i) {
    if (a.commands[i].ref != b.commands[i].ref || a.commands[i].oldId != b.commands[i].oldId ||
        a.commands[i].newId != b.commands[i].newId) {
      return false;
    }
  }
  return a.capabilities == b.capabilities && a.pushOptions == b.pushOptions;
}

void checkPushList(std::string_view input) {
  if (input.size() < 2) return;
  // A limit from 64 bytes to 64 KiB + 63, so that lists that outgrow it are common.
  const size_t limit = 64 + ((static_cast<uint8_t>(input[0]) << 8) | static_cast<uint8_t>(input[1]));
  const std::string_view body = input.substr(2);
  const policy::PushCommands whole = policy::parsePushCommands(body, limit);
  using Status = policy::PushCommands::Status;
  if (whole.status == Status::kCommands) {
    SANDGATE_FUZZ_CHECK(whole.consumed <= body.size(), "a list ends within the input");
    SANDGATE_FUZZ_CHECK(whole.consumed <= limit, "a list ends within its limit");
    for (const auto& c : whole.commands) {
      for (char ch : c.ref) {
        SANDGATE_FUZZ_CHECK(static_cast<unsigned char>(ch) > 0x20 && ch != 0x7f,
                            "a ref without controls or spaces");
      }
      SANDGATE_FUZZ_CHECK(c.oldId.size() == c.newId.size(), "object ids of one length");
    }
  }
  // Prefixes: every one for short inputs, else 64 spread over the input and those around the
  // end of the list.
  auto prefix = [&](size_t n) {
    const policy::PushCommands part = policy::parsePushCommands(body.substr(0, n), limit);
    if (part.status == Status::kNeedMore) {
      SANDGATE_FUZZ_CHECK(n < limit, "need more only below the limit");
      return;
    }
    if (part.status == Status::kCommands) {
      SANDGATE_FUZZ_CHECK(whole.status == Status::kCommands && sameCommands(part, whole),
                          "a prefix that ends the list ends it as the whole input does");
      return;
    }
    SANDGATE_FUZZ_CHECK(whole.status == Status::kProtocolError,
                        "a prefix refused as malformed means the whole input is");
  };
  if (body.size() <= 512) {
    for (size_t n = 0; n < body.size(); ++n) prefix(n);
  } else {
    for (size_t i = 0; i < 64; ++i) prefix(body.size() * i / 64);
    if (whole.status == Status::kCommands) {
      for (size_t n = whole.consumed > 8 ? whole.consumed - 8 : 0;
           n < body.size() && n <= whole.consumed + 8; ++n) {
        prefix(n);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    checkPushList(input);
  } else {
    checkCommand(input);
  }
  return 0;
}
