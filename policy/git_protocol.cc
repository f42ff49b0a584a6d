// The receive-pack command-list parser and the report-status refusal (see git_protocol.h).
#include "policy/git_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace sandgate::policy {

namespace {

constexpr size_t kMaxPktLen = 65520;        // LARGE_PACKET_MAX in Git
constexpr size_t kSideband64kData = 65515;  // a side-band-64k packet: 4 length, 1 band byte
constexpr size_t kSidebandData = 995;       // the old side-band: 1000-byte packets

bool allZeros(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) { return c == '0'; });
}

bool isObjectId(std::string_view id) {
  return (id.size() == 40 || id.size() == 64) && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Git refuses control characters and spaces in ref names (check-ref-format); a ref we print
// back in a report must not be able to start another pkt-line or report line either.
bool isRefName(std::string_view ref) {
  return !ref.empty() && std::all_of(ref.begin(), ref.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f;
  });
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct Pkt {
  enum class Kind { kNeedMore, kFlush, kData, kBad } kind = Kind::kNeedMore;
  std::string_view payload;  // kData, without one trailing '\n'
  size_t size = 0;           // bytes the packet takes
  std::string error;
};

Pkt readPkt(std::string_view in) {
  Pkt p;
  if (in.size() < 4) return p;
  size_t len = 0;
  for (int i = 0; i < 4; ++i) {
    int v = hexValue(in[i]);
    if (v < 0) {
      p.kind = Pkt::Kind::kBad;
      p.error = "a pkt-line length that is not four hex digits";
      return p;
    }
    len = len * 16 + static_cast<size_t>(v);
  }
  if (len == 0) {
    p.kind = Pkt::Kind::kFlush;
    p.size = 4;
    return p;
  }
  if (len < 4 || len > kMaxPktLen) {
    // 0001 and 0002 are protocol v2's delimiter and response end: not part of a v0/v1 push.
    p.kind = Pkt::Kind::kBad;
    p.error = fmt::format("a pkt-line of length {:04x}, which a push never sends", len);
    return p;
  }
  if (in.size() < len) return p;
  p.kind = Pkt::Kind::kData;
  p.size = len;
  p.payload = in.substr(4, len - 4);
  if (p.payload.ends_with('\n')) p.payload.remove_suffix(1);
  return p;
}

std::optional<PushCommand> parseCommand(std::string_view line, std::string* error) {
  const size_t a = line.find(' ');
  const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos) {
    *error = "a command that is not \"old-id new-id ref\"";
    return std::nullopt;
  }
  PushCommand c{std::string(line.substr(0, a)), std::string(line.substr(a + 1, b - a - 1)),
                std::string(line.substr(b + 1))};
  if (!isObjectId(c.oldId) || !isObjectId(c.newId) || c.oldId.size() != c.newId.size()) {
    *error = "a command whose object ids are not lower-case hex of one length (40 or 64)";
    return std::nullopt;
  }
  if (!isRefName(c.ref)) {
    *error = "a command whose ref name is empty or has spaces or control characters";
    return std::nullopt;
  }
  return c;
}

std::string clean(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

void appendSideband(std::string& out, char band, std::string_view data, size_t max) {
  while (!data.empty()) {
    const size_t n = std::min(max, data.size());
    out += fmt::format("{:04x}", n + 5);
    out += band;
    out.append(data.substr(0, n));
    data.remove_prefix(n);
  }
}

}  // namespace

bool PushCommand::isDelete() const { return allZeros(newId); }
bool PushCommand::isCreate() const { return allZeros(oldId); }

bool PushCommands::hasCapability(std::string_view cap) const {
  return std::find(capabilities.begin(), capabilities.end(), cap) != capabilities.end();
}

PushCommands parsePushCommands(std::string_view body, size_t limit) {
  PushCommands out;
  auto fail = [&](std::string why) {
    out = PushCommands{};
    out.status = PushCommands::Status::kProtocolError;
    out.error = std::move(why);
    return out;
  };
  size_t pos = 0;
  bool first = true;
  bool inOptions = false;
  while (true) {
    const std::string_view rest = body.substr(std::min(pos, body.size()));
    Pkt p = readPkt(rest);
    if (p.kind == Pkt::Kind::kBad) return fail(p.error);
    if (p.kind == Pkt::Kind::kNeedMore) {
      if (body.size() >= limit) {
        return fail(fmt::format("the command list is longer than {} bytes", limit));
      }
      out.status = PushCommands::Status::kNeedMore;
      return out;
    }
    if (pos + p.size > limit) {
      return fail(fmt::format("the command list is longer than {} bytes", limit));
    }
    pos += p.size;
    if (p.kind == Pkt::Kind::kFlush) {
      // Push options follow the command list only when the client asked for them, and a
      // push without commands (the probe git sends before a large pack) has none.
      if (!inOptions && !out.commands.empty() && out.hasCapability("push-options")) {
        inOptions = true;
        continue;
      }
      out.status = PushCommands::Status::kCommands;
      out.consumed = pos;
      return out;
    }
    std::string_view line = p.payload;
    if (inOptions) {
      out.pushOptions.emplace_back(line);
      continue;
    }
    if (first && line.starts_with("shallow ")) {
      if (!isObjectId(line.substr(8))) return fail("a shallow line without an object id");
      continue;
    }
    if (line.starts_with("push-cert")) {
      // The commands of a signed push are inside the certificate: not read here, so refused
      // rather than forwarded unchecked.
      return fail("a signed push (push-cert), which sandgate does not check");
    }
    const size_t nul = line.find('\0');
    if (nul != std::string_view::npos) {
      if (!first) return fail("capabilities after the first command");
      std::string_view caps = line.substr(nul + 1);
      line = line.substr(0, nul);
      while (!caps.empty()) {
        const size_t sp = caps.find(' ');
        std::string_view cap = caps.substr(0, sp);
        if (!cap.empty()) out.capabilities.emplace_back(cap);
        if (sp == std::string_view::npos) break;
        caps.remove_prefix(sp + 1);
      }
    }
    std::string why;
    auto cmd = parseCommand(line, &why);
    if (!cmd) return fail(why);
    out.commands.push_back(std::move(*cmd));
    first = false;
  }
}

std::string pktLine(std::string_view payload) {
  return fmt::format("{:04x}", payload.size() + 4) + std::string(payload);
}

std::string receivePackRefusal(const PushCommands& push, const std::vector<std::string>& why,
                               std::string_view message) {
  std::string report;
  if (push.hasCapability("report-status") || push.hasCapability("report-status-v2")) {
    report += pktLine("unpack ok\n");
    for (size_t i = 0; i < push.commands.size(); ++i) {
      const std::string_view reason = i < why.size() ? std::string_view(why[i]) : "refused";
      report += pktLine(fmt::format("ng {} sandgate: {}\n", push.commands[i].ref, clean(reason)));
    }
    report += "0000";
  }
  const bool band64k = push.hasCapability("side-band-64k");
  if (!band64k && !push.hasCapability("side-band")) return report;
  const size_t max = band64k ? kSideband64kData : kSidebandData;
  std::string out;
  if (!message.empty()) appendSideband(out, '\2', "sandgate: " + clean(message) + "\n", max);
  appendSideband(out, '\1', report, max);
  out += "0000";
  return out;
}

}  // namespace sandgate::policy
