// `sandgate connect HOST PORT`: a CONNECT through the proxy the environment names, then a relay
// between stdin/stdout and the tunnel (an OpenSSH ProxyCommand: `sandgate connect %h %p`).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace sandgate::run {

// The proxy to CONNECT through, from an http:// URL (HTTPS_PROXY and its kin).
struct ProxyEndpoint {
  std::string host;                          // a name or an address (no brackets)
  std::string port;                          // "3128" when the URL names none
  std::optional<std::string> authorization;  // "Basic base64(user:password)" from the userinfo
};

// Reads HTTPS_PROXY, https_proxy, ALL_PROXY, all_proxy (the first one set and non-empty) of
// `env`. Errors: none set, not an http:// URL, a path or query in it.
Result<ProxyEndpoint> proxyFromEnvironment(
    const std::map<std::string, std::string, std::less<>>& env);
Result<ProxyEndpoint> parseProxyUrl(std::string_view url);

// The largest answer head `connect` reads: a proxy that says more is refused, not buffered.
inline constexpr size_t kMaxAnswerHead = 16 * 1024;
// The largest refusal body read for its detail.
inline constexpr size_t kMaxRefusalBody = 64 * 1024;

// The proxy's answer to the CONNECT, parsed from its head (and, for a refusal, its body).
struct ConnectAnswer {
  int status = 0;
  std::string reason;  // X-Sandgate-Reason, as sent (escape before showing it)
  std::string detail;  // the JSON body's "error" (and "hint"), when there is one
};

// Parses an answer head (through its blank line). nullopt: not an HTTP/1.x status line, a bad
// status, or a header line without a colon (a hostile or broken proxy).
std::optional<ConnectAnswer> parseAnswerHead(std::string_view head);

// The message `connect` prints for a refused CONNECT (controls escaped: the text came from
// the proxy, and reaches a terminal).
std::string refusalMessage(std::string_view target, const ConnectAnswer& answer);

// Runs `sandgate connect`: CONNECT host:port through the proxy of `env`, reading the answer
// head one byte at a time so that nothing after it is consumed; on 200 relays `in` to the
// tunnel and the tunnel to `out` until both directions have ended (each end half-closed as its
// source ends). Messages go to stderr. Returns the exit status: 0, 1 refused or failed, 2 usage.
int connectAndRelay(const std::string& host, const std::string& port,
                    const std::map<std::string, std::string, std::less<>>& env, int in = 0,
                    int out = 1);

}  // namespace sandgate::run
