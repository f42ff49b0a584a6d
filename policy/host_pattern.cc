// Validation of host patterns at load time, so that a policy that cannot mean what its author
// wanted (a wildcard over a whole TLD, a mid-label '*', a Unicode name) never gets loaded.
#include "policy/host_pattern.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>

#include "policy/host.h"

namespace sandgate::policy {

namespace {

// A compact list of suffixes under which anyone can register names, taken from the Public
// Suffix List. "*.<one of these>" would admit hosts controlled by arbitrary third parties,
// which makes it an exfiltration channel rather than an allow rule. Single labels ("*.com",
// "*.internal") are refused separately, so only multi-label suffixes need listing for ccTLDs.
constexpr std::array kPublicSuffixes = {
    // Generic and common country TLDs (documentation; single labels are refused anyway).
    "com",
    "net",
    "org",
    "io",
    "dev",
    "app",
    "co",
    "uk",
    "de",
    "jp",
    "cn",
    "au",
    "br",
    "in",
    "fr",
    "ru",
    "nl",
    "eu",
    "us",
    "ca",
    "ai",
    "me",
    "info",
    "biz",
    "xyz",
    "cloud",
    // Second-level registries.
    "co.uk",
    "org.uk",
    "ac.uk",
    "gov.uk",
    "me.uk",
    "ltd.uk",
    "plc.uk",
    "net.uk",
    "co.jp",
    "ne.jp",
    "or.jp",
    "ac.jp",
    "com.cn",
    "net.cn",
    "org.cn",
    "gov.cn",
    "com.au",
    "net.au",
    "org.au",
    "edu.au",
    "gov.au",
    "com.br",
    "net.br",
    "org.br",
    "co.in",
    "net.in",
    "org.in",
    "com.mx",
    "com.tr",
    "com.tw",
    "com.hk",
    "com.sg",
    "co.nz",
    "co.za",
    "co.kr",
    "or.kr",
    "com.ar",
    "com.ua",
    "co.il",
    "ac.il",
    // Hosting platforms where every customer gets a subdomain.
    "github.io",
    "gitlab.io",
    "herokuapp.com",
    "appspot.com",
    "cloudfront.net",
    "amazonaws.com",
    "s3.amazonaws.com",
    "compute.amazonaws.com",
    "elasticbeanstalk.com",
    "azurewebsites.net",
    "cloudapp.net",
    "blob.core.windows.net",
    "web.core.windows.net",
    "azureedge.net",
    "firebaseapp.com",
    "web.app",
    "pages.dev",
    "workers.dev",
    "r2.dev",
    "vercel.app",
    "netlify.app",
    "fly.dev",
    "onrender.com",
    "blogspot.com",
    "ngrok.io",
    "ngrok-free.app",
    "glitch.me",
    "repl.co",
    "run.app",
    "trycloudflare.com",
    "duckdns.org",
    "no-ip.org",
};

}  // namespace

bool isPublicSuffix(std::string_view suffix) {
  return std::find(kPublicSuffixes.begin(), kPublicSuffixes.end(), suffix) != kPublicSuffixes.end();
}

std::variant<HostPattern, std::string> parseHostPattern(std::string_view raw) {
  if (raw.empty()) return std::string("host pattern is empty");

  if (raw.starts_with("re:")) {
    std::string_view src = raw.substr(3);
    if (src.empty()) return std::string("\"re:\" needs a regular expression after it");
    RE2::Options opts;
    opts.set_log_errors(false);
    RE2 re(src, opts);
    if (!re.ok()) return "invalid RE2 regular expression: " + re.error();
    return HostPattern{HostPattern::Kind::kRegex, std::string(src), false};
  }

  if (raw == "*") {
    return std::string(
        "a bare '*' would allow every host; list the hosts, or use '*.example.com' for the "
        "subdomains of one domain");
  }

  std::string_view body = raw;
  bool wildcard = false;
  if (body.starts_with("*.")) {
    wildcard = true;
    body.remove_prefix(2);
  }
  if (body.find('*') != std::string_view::npos) {
    return std::string(
        "'*' is only allowed as the whole leftmost label, as in '*.example.com' (it matches "
        "subdomains at any depth)");
  }
  if (body.empty()) return std::string("expected a domain after '*.'");

  // Bare IPv6 is accepted in patterns (YAML needs no brackets); it is normalised like "[...]".
  std::string bracketed;
  if (!wildcard && body.front() != '[' && parseIpv6(body)) {
    bracketed.append("[").append(body).append("]");
    body = bracketed;
  }
  auto norm = normalizeHost(body);
  if (auto* err = std::get_if<HostError>(&norm)) return err->message;
  Target t = std::get<Target>(std::move(norm));
  if (!wildcard) return HostPattern{HostPattern::Kind::kExact, std::move(t.name), t.isAddress};

  if (t.isAddress) {
    return "'*.' cannot be applied to an IP address (" + t.name + "); use cidrs: for ranges";
  }
  if (t.name.find('.') == std::string::npos) {
    return "'*." + t.name +
           "' covers a whole top-level domain; wildcards need at least two labels, as in "
           "'*.example.com'";
  }
  if (isPublicSuffix(t.name)) {
    return "'*." + t.name + "' covers the public suffix '" + t.name +
           "', where anyone can register names; list the hosts or a domain under it";
  }
  return HostPattern{HostPattern::Kind::kWildcard, std::move(t.name), false};
}

}  // namespace sandgate::policy
