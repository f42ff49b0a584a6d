// The command's environment (nothing inherited but PATH, LANG, TERM) and its CA bundle.
#pragma once

#include <string>
#include <vector>

#include "sandbox/launcher.h"

namespace sandgate::sandbox {

// Where the sandbox finds the bundle the variables name (inside the private /run).
inline constexpr const char* kCaBundlePath = "/run/sandgate/ca-bundle.pem";
// The host's system bundle; the sandbox sees the combined bundle at this path too, so tools that
// ignore the variables (Go, OpenSSL defaults) also trust sandgate's CA.
inline constexpr const char* kSystemCaBundle = "/etc/ssl/certs/ca-certificates.crt";

// The variables that name the CA bundle, for tests and docs.
const std::vector<std::string>& caBundleVariables();

// "K=V" entries: PATH, LANG, TERM from the launcher (when set), HOME = options.home, the proxy
// variables (HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy = http://127.0.0.1:<port>;
// NO_PROXY/no_proxy = localhost,127.0.0.1,::1), the CA variables, then options.env (last wins).
// The launcher's other variables (tokens, cloud credentials) are never passed on.
std::vector<std::string> buildEnvironment(const Options& options);

// The host roots (kSystemCaBundle, when readable) followed by options.extraCaPem.
std::string buildCaBundle(const Options& options);

}  // namespace sandgate::sandbox
