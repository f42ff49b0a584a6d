// TARGET parsing for the policy CLI.
#include "policy/target.h"

#include "common/host_port.h"

namespace sandgate::policy {

namespace {

std::variant<CheckTarget, std::string> withHost(std::string_view host, CheckTarget out) {
  auto norm = normalizeHost(host);
  if (auto* err = std::get_if<HostError>(&norm)) return err->message;
  out.target = std::get<Target>(std::move(norm));
  return out;
}

}  // namespace

std::variant<CheckTarget, std::string> parseCheckTarget(std::string_view text) {
  if (text.empty()) return std::string("empty target");
  CheckTarget out;
  std::string_view authority = text;
  auto sep = text.find("://");
  if (sep != std::string_view::npos) {
    std::string_view scheme = text.substr(0, sep);
    if (scheme == "http") {
      out.port = 80;
    } else if (scheme == "https") {
      out.port = 443;
    } else {
      return "unsupported scheme \"" + std::string(scheme) + "\" (expected http or https)";
    }
    out.scheme = std::string(scheme);
    std::string_view rest = text.substr(sep + 3);
    if (rest.find('#') != std::string_view::npos) return std::string("a URL fragment is not allowed");
    auto end = rest.find_first_of("/?");
    authority = rest.substr(0, end);
    std::string_view path = end == std::string_view::npos ? "" : rest.substr(end);
    path = path.substr(0, path.find('?'));
    out.path = path.empty() ? "/" : std::string(path);
    if (authority.find('@') != std::string_view::npos) {
      return std::string("userinfo (user@) in the URL is not allowed");
    }
  }
  if (authority.empty()) return std::string("missing host");
  // "host:port" and "[v6]:port" carry a port; anything else is a bare host or IP literal.
  bool hasPort = authority.front() == '['
                     ? authority.find("]:") != std::string_view::npos
                     : authority.find(':') != std::string_view::npos;
  if (hasPort) {
    auto hp = parseHostPort(authority);
    if (!hp) return "invalid host:port \"" + std::string(authority) + "\"";
    out.port = hp->port;
    std::string host = hp->bracketed ? "[" + hp->host + "]" : hp->host;
    return withHost(host, std::move(out));
  }
  return withHost(authority, std::move(out));
}

}  // namespace sandgate::policy
