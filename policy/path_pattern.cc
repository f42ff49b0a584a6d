// Method tokens, path globs compiled to RE2, and the path normal-form check.
#include "policy/path_pattern.h"

#include <re2/re2.h>

namespace sandgate::policy {

namespace {

// RFC 9110 tchar.
bool isTchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  std::string_view extra = "!#$%&'*+-.^_`|~";
  return extra.find(c) != std::string_view::npos;
}

bool ieq(char a, char b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return lower(a) == lower(b);
}

bool isHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Visible ASCII a glob or a path may contain. '?' and '#' never reach us (the query and the
// fragment are not part of the path), so in a pattern they are a mistake.
bool isPathChar(char c) { return c > 0x20 && c < 0x7f && c != '?' && c != '#'; }

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 2.3.
bool isUnreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// "%20" (space) or an encoded control at the end of a segment.
bool endsWithEncodedBlank(std::string_view seg) {
  if (seg.size() < 3 || seg[seg.size() - 3] != '%') return false;
  const int a = hexValue(seg[seg.size() - 2]), b = hexValue(seg[seg.size() - 1]);
  if (a < 0 || b < 0) return false;
  const int v = a * 16 + b;
  return v <= 0x20 || v == 0x7f;
}

}  // namespace

bool isValidMethod(std::string_view method, std::string* error) {
  if (method.empty()) {
    *error = "empty method";
    return false;
  }
  for (char c : method) {
    if (!isTchar(c)) {
      *error = "method \"" + std::string(method) + "\" contains '" + std::string(1, c) +
               "', which is not allowed in an HTTP method token";
      return false;
    }
    if (c >= 'a' && c <= 'z') {
      std::string upper(method);
      for (char& u : upper) {
        if (u >= 'a' && u <= 'z') u = static_cast<char>(u - 'a' + 'A');
      }
      *error = "methods are case-sensitive; write \"" + upper + "\" rather than \"" +
               std::string(method) + "\"";
      return false;
    }
  }
  return true;
}

bool isNormalPath(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    // ';' starts a path parameter: Tomcat, Spring and Jetty drop "..;" to "..", so
    // /v1/..;/admin is /admin to them.
    if (c <= 0x20 || c >= 0x7f || c == '\\' || c == '#' || c == '?' || c == ';') return false;
    if (c == '%') {
      // %2e '.', %2f '/', %5c '\', %3b ';': an upstream that decodes them sees a different
      // path. %c0 and %c1 start overlong UTF-8 ("%c0%ae" is '.' to a lax decoder), and a '%'
      // without two hex digits ("%u002e") is an escape only some servers know.
      if (i + 2 >= path.size()) return false;
      char a = path[i + 1], b = path[i + 2];
      if (!isHex(a) || !isHex(b)) return false;
      if ((a == '2' && (ieq(b, 'e') || ieq(b, 'f'))) || (a == '5' && ieq(b, 'c')) ||
          (a == '3' && ieq(b, 'b')) || (ieq(a, 'c') && (b == '0' || b == '1'))) {
        return false;
      }
      // Encoded controls: "%00" ends the path for a C-string server, "%0a" splits log lines.
      if (a == '0' || a == '1' || (a == '7' && ieq(b, 'f'))) return false;
    }
  }
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    size_t end = slash == std::string_view::npos ? path.size() : slash;
    std::string_view seg = path.substr(start, end - start);
    if (seg == "." || seg == "..") return false;
    // A segment ending in '.' or an encoded space/control: IIS, Windows file servers and some
    // routers trim them, so "/admin./x" and "/admin%20/x" are "/admin/x" there.
    if (seg.ends_with('.') || endsWithEncodedBlank(seg)) return false;
    if (slash == std::string_view::npos) break;
    if (seg.empty()) return false;  // "//": some servers collapse it, some do not
    start = slash + 1;
  }
  return true;
}

std::string canonicalPath(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size()) {
      const int a = hexValue(path[i + 1]), b = hexValue(path[i + 2]);
      if (a >= 0 && b >= 0) {
        const char c = static_cast<char>(a * 16 + b);
        if (isUnreserved(c)) {
          out += c;
          i += 2;
          continue;
        }
      }
    }
    out += path[i];
  }
  return out;
}

bool pathPatternToRegex(std::string_view pattern, std::string* regex, std::string* error) {
  if (pattern.starts_with("re:")) {
    std::string_view src = pattern.substr(3);
    if (src.empty()) {
      *error = "\"re:\" needs a regular expression after it";
      return false;
    }
    RE2::Options opts;
    opts.set_log_errors(false);
    RE2 re(src, opts);
    if (!re.ok()) {
      *error = "invalid RE2 regular expression: " + re.error();
      return false;
    }
    *regex = std::string(src);
    return true;
  }
  // Matched against canonical paths, so written in that form too ("/%61dmin" is "/admin").
  const std::string canon = canonicalPath(pattern);
  pattern = canon;
  if (pattern.empty() || pattern[0] != '/') {
    *error = "a path pattern must start with '/' (or be \"re:<RE2>\"), got \"" +
             std::string(pattern) + "\"";
    return false;
  }
  for (char c : pattern) {
    if (!isPathChar(c)) {
      *error = c == '?' ? "a path pattern cannot contain '?': the query string is not matched"
                        : "character '" + std::string(1, c) + "' is not allowed in a path pattern";
      return false;
    }
  }
  // Normal form with '*' treated as an ordinary character: "/a/../b" could never match a
  // request (those are refused), so it is a mistake to report now.
  if (!isNormalPath(pattern)) {
    *error = "path pattern \"" + std::string(pattern) +
             "\" is not in normal form (no '.' or '..' segments, no encoded '.', '/' or '\\')";
    return false;
  }
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] != '*') {
      out += RE2::QuoteMeta(pattern.substr(i, 1));
      ++i;
      continue;
    }
    size_t run = 0;
    while (i + run < pattern.size() && pattern[i + run] == '*') ++run;
    if (run > 2) {
      *error = "\"" + std::string(pattern) + "\": use '*' (one segment) or '**' (any depth)";
      return false;
    }
    if (run == 1) {
      out += "[^/]*";
      i += 1;
    } else if (i > 0 && pattern[i - 1] == '/' && i + 2 == pattern.size()) {
      // A trailing "/**" is the directory and everything under it: "/admin/**" matches
      // "/admin" too, which servers serve as (or redirect to) "/admin/".
      out.resize(out.size() - RE2::QuoteMeta("/").size());
      out += "(?:/.*)?";
      i += 2;
    } else if (i > 0 && pattern[i - 1] == '/' && i + 2 < pattern.size() && pattern[i + 2] == '/') {
      out += "(?:.*/)?";  // "/**/" spans zero or more whole segments
      i += 3;
    } else {
      out += ".*";
      i += 2;
    }
  }
  *regex = std::move(out);
  return true;
}

}  // namespace sandgate::policy
