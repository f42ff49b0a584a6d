// The start of a git-receive-pack request body (Git's pack protocol, v0/v1: what every
// current client sends for a push), and the report-status answer that refuses one. Pure and
// bounded: the parser looks only at the bytes it is given and never at the pack after them.
//
//   update-requests = *shallow command-list [push-options] pack
//   command-list    = PKT-LINE(old SP new SP ref NUL capabilities) *PKT-LINE(old SP new SP ref)
//                     flush-pkt
//   push-options    = *PKT-LINE(option) flush-pkt        (only when "push-options" was asked)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate::policy {

struct PushCommand {
  std::string oldId, newId;  // hex object ids (SHA-1 or SHA-256), all zeros: none
  std::string ref;
  bool isDelete() const;  // the new id is all zeros
  bool isCreate() const;  // the old id is all zeros
};

struct PushCommands {
  enum class Status { kNeedMore, kCommands, kProtocolError };
  Status status = Status::kNeedMore;
  std::vector<PushCommand> commands;  // kCommands: in the client's order (may be empty)
  std::vector<std::string> capabilities;
  std::vector<std::string> pushOptions;
  size_t consumed = 0;  // kCommands: bytes of the command list and push options
  std::string error;    // kProtocolError: what was wrong, one sentence

  bool hasCapability(std::string_view cap) const;
};

// Parses the command list at the start of `body` (the decoded request body). kNeedMore while
// it is incomplete and `body` is shorter than `limit`; a list that does not end within `limit`
// bytes is kProtocolError, and so are a signed push (push-cert), malformed pkt-lines, object
// ids that are not hex of one length, and ref names with control characters or spaces.
PushCommands parsePushCommands(std::string_view body, size_t limit);

// The response body (application/x-git-receive-pack-result) that refuses `push` as a whole
// before its pack is read: "unpack ok" (nothing was unpacked, so nothing failed to unpack),
// then "ng <ref> sandgate: <why>" for every command (`why[i]` for command i), in side-band-64k
// (or side-band) when the client asked for it, with `message` also on the progress band
// (git prints it as "remote: …"). Without report-status in the capabilities only the
// message is sent.
std::string receivePackRefusal(const PushCommands& push, const std::vector<std::string>& why,
                               std::string_view message);

// One pkt-line: four hex digits of length (including themselves), then `payload`.
std::string pktLine(std::string_view payload);

}  // namespace sandgate::policy
