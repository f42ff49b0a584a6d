// The audit log writer: canonical JSON line formatting and crash-safe appends.
#include "proxy/observe/audit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <type_traits>

#include "common/safe_open.h"
#include "proxy/observe/audit_fields.h"

namespace sandgate::proxy {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void appendEscapedCodeUnit(std::string& out, unsigned cu) {
  out += "\\u";
  out += kHex[(cu >> 12) & 0xf];
  out += kHex[(cu >> 8) & 0xf];
  out += kHex[(cu >> 4) & 0xf];
  out += kHex[cu & 0xf];
}

// Length of the well-formed UTF-8 sequence starting at s[i] (Unicode Table 3-7: no
// overlongs, no surrogates, nothing above U+10FFFF), or 0 if there is none.
size_t utf8Length(std::string_view s, size_t i) {
  auto at = [&](size_t k) -> unsigned { return static_cast<unsigned char>(s[i + k]); };
  auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
    return i + k < s.size() && at(k) >= lo && at(k) <= hi;
  };
  unsigned b = at(0);
  if (b >= 0xc2 && b <= 0xdf) return cont(1) ? 2 : 0;
  if (b == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (b == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (b == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (b >= 0xf1 && b <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// Printable ASCII other than the quote and the backslash: copied as it is.
constexpr bool plainByte(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

// Appends `s` as a JSON string. Anything a terminal or a log shipper could misread is
// escaped, so that a hostile Host or path cannot forge lines or fields.
void appendString(std::string& out, std::string_view s) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    // The common case, a run of plain bytes, goes in with one append.
    size_t run = i;
    while (run < s.size() && plainByte(static_cast<unsigned char>(s[run]))) ++run;
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      continue;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            appendEscapedCodeUnit(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    size_t len = utf8Length(s, i);
    if (len == 0) {
      appendEscapedCodeUnit(out, 0xfffd);
      ++i;
      continue;
    }
    unsigned cp = 0;
    if (len == 2) cp = ((c & 0x1fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3fu);
    if (len == 3) {
      cp = ((c & 0x0fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3fu) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3fu);
    }
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029) {
      appendEscapedCodeUnit(out, cp);  // C1 controls (e.g. CSI) and JS line separators
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  out += '"';
}

// Empty means "not known / not applicable" and is written as null.
void appendOptional(std::string& out, std::string_view s) {
  if (s.empty()) {
    out += "null";
  } else {
    appendString(out, s);
  }
}

// `"key":` (after a comma unless `first`) written in place, with one size change rather than
// four appends: a line has 22 keys, and the separate appends cost some 600 instructions per
// line. Keys are constants of audit_fields.h: plain ASCII, no escaping needed.
void appendKey(std::string& out, std::string_view key, bool first = false) {
  const size_t at = out.size();
  out.resize(at + key.size() + (first ? 3 : 4));
  char* p = out.data() + at;
  if (!first) *p++ = ',';
  *p++ = '"';
  p += key.copy(p, key.size());
  *p++ = '"';
  *p = ':';
}

std::string_view capped(std::string_view s) {
  return s.size() > AuditLog::kMaxFieldBytes ? s.substr(0, AuditLog::kMaxFieldBytes) : s;
}

// Writes `v` (0 <= v < 10^width) as exactly `width` digits.
char* putDigits(char* p, int v, int width) {
  for (int k = width - 1; k >= 0; --k) {
    p[k] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
  return p + width;
}

// Appends the time as a JSON string, e.g. "2024-05-01T12:00:00.123Z".
void appendTime(std::string& out, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = floor<milliseconds>(t).time_since_epoch().count();
  auto secs = static_cast<time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  int millis = static_cast<int>(ms - static_cast<int64_t>(secs) * 1000);
  struct tm tm {};
  if (gmtime_r(&secs, &tm) == nullptr) {
    out += "\"1970-01-01T00:00:00.000Z\"";
    return;
  }
  // Four-digit years always: the clock counts 64-bit nanoseconds, 1677 to 2262.
  static_assert(std::is_same_v<system_clock::duration, nanoseconds>);
  char buf[32];
  char* p = buf;
  *p++ = '"';
  p = putDigits(p, tm.tm_year + 1900, 4);
  *p++ = '-';
  p = putDigits(p, tm.tm_mon + 1, 2);
  *p++ = '-';
  p = putDigits(p, tm.tm_mday, 2);
  *p++ = 'T';
  p = putDigits(p, tm.tm_hour, 2);
  *p++ = ':';
  p = putDigits(p, tm.tm_min, 2);
  *p++ = ':';
  p = putDigits(p, tm.tm_sec, 2);
  *p++ = '.';
  p = putDigits(p, millis, 3);
  *p++ = 'Z';
  *p++ = '"';
  out.append(buf, p);
}

template <class Int>
void appendInt(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, ec == std::errc() ? end : buf);
}

// Opens (creating with 0640 if needed) `path` for appending; errno-based Diagnostic on failure.
Result<int> openAppend(const std::string& path) {
  auto fail = [&](int err) -> Diagnostic {
    std::string msg;
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (err == ENOENT && !parent.empty() && !std::filesystem::is_directory(parent, ec)) {
      msg = "cannot open audit log '" + path + "': directory '" + parent.string() +
            "' does not exist (it is not created automatically)";
    } else {
      msg = "cannot open audit log '" + path + "' for appending: " + safe_open::describeError(err);
    }
    return Diagnostic{"", 0, 0, "audit.path", msg};
  };
  // No link is followed on the way (safe_open.h): where a sandbox can write in a directory
  // on the path, it could otherwise point the log at any file the proxy may write.
  // Two attempts: the file can disappear between the exclusive create and the plain open.
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = safe_open::openNoSymlinks(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL, 0640);
    if (fd >= 0) {
      // The umask must not widen or narrow what the operator expects of a new audit log.
      if (::fchmod(fd, 0640) != 0) {
        int err = errno;
        ::close(fd);
        return fail(err);
      }
      return fd;
    }
    if (errno != EEXIST) return fail(errno);
    fd = safe_open::openNoSymlinks(path, O_WRONLY | O_APPEND);
    if (fd >= 0) return fd;
    if (errno != ENOENT) return fail(errno);
  }
  return fail(ENOENT);
}

}  // namespace

std::string AuditLog::format(const AuditRecord& r) {
  std::string out;
  out.reserve(512 + r.path.size() + r.host.size() + r.error.size());
  out += '{';
  appendKey(out, field::kTime, true);
  appendTime(out, r.time);
  appendKey(out, field::kKind);
  appendOptional(out, r.kind);
  appendKey(out, field::kRequestId);
  appendOptional(out, r.requestId);
  appendKey(out, field::kConnectionId);
  appendOptional(out, r.connectionId);
  appendKey(out, field::kRun);
  appendOptional(out, r.run);
  appendKey(out, field::kTask);
  appendOptional(out, r.task);
  appendKey(out, field::kClient);
  appendOptional(out, r.client);
  appendKey(out, field::kListener);
  appendOptional(out, r.listener);
  appendKey(out, field::kMode);
  appendOptional(out, r.mode);
  appendKey(out, field::kMethod);
  appendOptional(out, r.method);
  appendKey(out, field::kScheme);
  appendOptional(out, r.scheme);
  appendKey(out, field::kHost);
  appendOptional(out, capped(r.host));
  appendKey(out, field::kPort);
  appendInt(out, r.port);
  appendKey(out, field::kPath);
  appendOptional(out, capped(r.path));
  appendKey(out, field::kVerdict);
  appendOptional(out, outcomeName(r.verdict));
  appendKey(out, field::kReason);
  appendOptional(out, r.reason);
  appendKey(out, field::kRule);
  appendOptional(out, r.rule);
  appendKey(out, field::kCredential);
  appendOptional(out, r.credential);
  appendKey(out, field::kInjected);
  out += r.injected ? "true" : "false";
  appendKey(out, field::kStatus);
  appendInt(out, r.status);
  appendKey(out, field::kBytesUp);
  appendInt(out, r.bytesUp);
  appendKey(out, field::kBytesDown);
  appendInt(out, r.bytesDown);
  appendKey(out, field::kDuration);
  // JSON has no NaN or infinity; a clock that went backwards is not a negative duration.
  double ms =
      std::isfinite(r.durationSeconds) && r.durationSeconds > 0 ? r.durationSeconds * 1000.0 : 0.0;
  char buf[64];  // to_chars: never a locale's decimal comma
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ms, std::chars_format::fixed, 3);
  out.append(buf, ec == std::errc() ? end : buf);
  appendKey(out, field::kUpstream);
  appendOptional(out, r.upstream);
  appendKey(out, field::kParent);
  appendOptional(out, r.parent);
  appendKey(out, field::kError);
  appendOptional(out, capped(r.error));
  appendKey(out, field::kGit);
  if (!r.git) {
    out += "null";
  } else {
    out += '{';
    appendKey(out, field::kGitRepository, true);
    appendOptional(out, capped(r.git->repository));
    appendKey(out, field::kGitService);
    appendOptional(out, r.git->service);
    appendKey(out, field::kGitRefs);
    out += '[';
    // A push may name thousands of refs: the line keeps the first ones, so that it stays
    // bounded (the refusal names its reason in `reason` either way).
    const size_t n = std::min(r.git->refs.size(), kMaxGitRefs);
    for (size_t i = 0; i < n; ++i) {
      const auto& ref = r.git->refs[i];
      if (i) out += ',';
      out += '{';
      appendKey(out, field::kGitRef, true);
      appendOptional(out, capped(ref.ref));
      appendKey(out, field::kGitOld);
      appendOptional(out, capped(ref.oldId));
      appendKey(out, field::kGitNew);
      appendOptional(out, capped(ref.newId));
      appendKey(out, field::kReason);
      appendOptional(out, ref.reason);
      out += '}';
    }
    out += "]}";
  }
  appendKey(out, field::kBudget);
  if (!r.budget) {
    out += "null";
  } else {
    // Names and windows come from the config, never from a client: still escaped like the rest.
    out += '{';
    appendKey(out, field::kBudgetName, true);
    appendOptional(out, r.budget->name);
    appendKey(out, field::kBudgetWindow);
    appendOptional(out, r.budget->window);
    appendKey(out, field::kBudgetMetric);
    appendOptional(out, r.budget->metric);
    appendKey(out, field::kBudgetUsed);
    appendInt(out, r.budget->used);
    appendKey(out, field::kBudgetLimit);
    appendInt(out, r.budget->limit);
    out += '}';
  }
  appendKey(out, field::kLlm);
  if (!r.llm) {
    out += "null";
  } else {
    // The model is the client's, read strictly (printable ASCII, bounded): escaped anyway.
    out += '{';
    appendKey(out, field::kLlmModel, true);
    appendOptional(out, capped(r.llm->model));
    appendKey(out, field::kLlmInputTokens);
    appendInt(out, r.llm->inputTokens);
    appendKey(out, field::kLlmOutputTokens);
    appendInt(out, r.llm->outputTokens);
    appendKey(out, field::kLlmSpend);
    appendOptional(
        out, fmt::format("{}.{:06}", r.llm->spendMicros / 1000000, r.llm->spendMicros % 1000000));
    appendKey(out, field::kLlmUsage);
    appendOptional(out, r.llm->usage);
    out += '}';
  }
  appendKey(out, field::kBudgetFailOpen);
  out += r.budgetFailOpen ? "true" : "false";
  appendKey(out, field::kApproval);
  if (!r.approval) {
    out += "null";
  } else {
    out += '{';
    appendKey(out, field::kApprovalId, true);
    appendInt(out, r.approval->id);
    appendKey(out, field::kApprovalAnswer);
    appendOptional(out, r.approval->answer);
    appendKey(out, field::kApprovalByUid);
    if (r.approval->byUid) {
      appendInt(out, *r.approval->byUid);
    } else {
      out += "null";
    }
    appendKey(out, field::kApprovalByUser);
    appendOptional(out, capped(r.approval->byUser));
    out += '}';
  }
  out += "}\n";
  return out;
}

Result<std::shared_ptr<AuditLog>> AuditLog::open(const std::optional<std::string>& path) {
  if (!path) return std::shared_ptr<AuditLog>(new AuditLog(STDOUT_FILENO, false, std::nullopt));
  if (path->empty()) {
    return Diagnostic{"", 0, 0, "audit.path", "the audit log path is empty"};
  }
  auto fd = openAppend(*path);
  if (!fd) return fd.errors();
  return std::shared_ptr<AuditLog>(new AuditLog(*fd, true, path));
}

std::shared_ptr<AuditLog> AuditLog::adopt(int fd) {
  return std::shared_ptr<AuditLog>(new AuditLog(fd, true, std::nullopt));
}

AuditLog::AuditLog(int fd, bool ownsFd, std::optional<std::string> path)
    : fd_(fd), ownsFd_(ownsFd), path_(std::move(path)) {}

AuditLog::~AuditLog() {
  if (ownsFd_) ::close(fd_);
}

void AuditLog::write(const AuditRecord& r) {
  const std::string line = format(r);
  std::lock_guard lock(mu_);
  // The lock makes a completed short write (pipes, signals, a full disk that frees up) still
  // one contiguous line; O_APPEND makes each write(2) land at the end even with other
  // writers such as a second process.
  size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (n == 0) {
      err = EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0) {
    if (failing_) spdlog::warn("audit log: writes succeed again");
    failing_ = false;
    return;
  }
  writeErrors_.fetch_add(1, std::memory_order_relaxed);
  if (!failing_) {
    spdlog::warn("audit log: write to {} failed: {} (lines are being lost; counted)",
                 path_ ? *path_ : std::string(ownsFd_ ? "its descriptor" : "stdout"),
                 std::strerror(err));
  }
  failing_ = true;
}

std::optional<Diagnostic> AuditLog::reopen() {
  if (!path_ || !ownsFd_) return std::nullopt;
  auto fd = openAppend(*path_);
  if (!fd) return fd.errors().front();
  int old;
  {
    std::lock_guard lock(mu_);
    old = fd_;
    fd_ = *fd;
  }
  ::close(old);
  return std::nullopt;
}

}  // namespace sandgate::proxy
