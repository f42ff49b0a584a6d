// Building the sandbox environment and CA bundle from the options (launcher side, before fork).
#include "sandbox/environment.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace sandgate::sandbox {

const std::vector<std::string>& caBundleVariables() {
  static const std::vector<std::string> vars = {
      "SSL_CERT_FILE",  "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",    "NODE_EXTRA_CA_CERTS",
      "GIT_SSL_CAINFO", "PIP_CERT",           "CARGO_HTTP_CAINFO", "DENO_CERT",
      "AWS_CA_BUNDLE",  "npm_config_cafile"};
  return vars;
}

std::vector<std::string> buildEnvironment(const Options& options) {
  std::map<std::string, std::string> env;
  for (const char* name : {"PATH", "LANG", "TERM"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  if (!env.contains("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  env["HOME"] = options.home;
  std::string proxy = "http://127.0.0.1:" + std::to_string(options.proxyPort);
  for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) {
    env[name] = proxy;
  }
  env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1";
  for (const auto& name : caBundleVariables()) env[name] = kCaBundlePath;
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::string buildCaBundle(const Options& options) {
  std::string bundle;
  std::ifstream in(kSystemCaBundle);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    bundle = ss.str();
  }
  if (!options.extraCaPem.empty()) {
    if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
    bundle += options.extraCaPem;
    if (bundle.back() != '\n') bundle += '\n';
  }
  return bundle;
}

}  // namespace sandgate::sandbox
