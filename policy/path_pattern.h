// Method and path rules of visible requests: validation of `methods`, glob → RE2 translation
// of `paths`, and the normal-form check that keeps path rules from being walked around.
// Internal to policy/.
#pragma once

#include <string>
#include <string_view>

namespace sandgate::policy {

// `methods:` entries are case-sensitive HTTP tokens (RFC 9110); we also require upper case,
// since "get" is a different method from "GET" and is almost certainly a typo.
bool isValidMethod(std::string_view method, std::string* error);

// Translates one `paths:` entry to RE2 source that must match the whole path:
//   "/v1/models"   literal
//   "/v1/*/files"  '*' matches within one segment (no '/')
//   "/v1/**"       '**' matches across segments; "/a/**/b" also matches "/a/b"
//   "re:^/v[12]/"  RE2 as written, matched against the whole path
// Globs must start with '/' and be in normal form. Returns false with `error` set on failure.
bool pathPatternToRegex(std::string_view pattern, std::string* regex, std::string* error);

// A path is in normal form when it starts with '/', has no ".", ".." or empty segments, no
// ';' (path parameters), no '\', no percent-encoded '.', '/', '\' or ';', no overlong UTF-8
// lead byte (%c0, %c1), no '%' without two hex digits, no percent-encoded control byte
// (%00-%1f, %7f: a NUL ends the path for some servers), no segment that ends in '.' or in an
// encoded space or control ("/admin./x", "/admin%20/x": IIS, Windows file servers and some
// routers trim them), and only visible ASCII. Paths that are not may be read differently by
// the upstream than by our patterns, so path rules refuse them.
// Meant for canonicalPath()'s output: an encoded '.' has been decoded there.
bool isNormalPath(std::string_view path);

// The one form every path glob is matched against (RFC 3986 6.2.2.2): percent-encoded
// unreserved characters (ALPHA, DIGIT, '-', '.', '_', '~') are decoded, since a server reads
// "/%61dmin" as "/admin"; every other escape is kept as sent. Used by decide() (so by the
// proxy, `policy check` and `policy test` alike) and on the patterns themselves at compile
// time. The request is forwarded as sent: only the matching uses this form.
std::string canonicalPath(std::string_view path);

}  // namespace sandgate::policy
