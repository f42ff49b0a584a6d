// The HTTPS client broker/ mints GitHub App tokens with (broker::ApiClient): the config's
// `resolve:` overrides first, then DNS; TLS verified against the snapshot's upstream trust
// (tls.upstream_ca and the credential's upstream_ca, as for intercepted requests), the name
// checked per RFC 6125; one bounded exchange on a private io_context, off the data path.
//
// The API host is the operator's (the credential's `api:`), never a sandbox's choice, so its
// addresses are not vetted against the deny ranges: a GitHub Enterprise Server on a private
// network is a normal setup.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "broker/github_app.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

class HttpsApiClient final : public broker::ApiClient {
 public:
  HttpsApiClient(std::shared_ptr<const UpstreamTls> tls,
                 std::unordered_map<std::string, ResolveOverride> resolve)
      : tls_(std::move(tls)), resolve_(std::move(resolve)) {}

  broker::ApiResponse post(const broker::ApiRequest& req, std::stop_token stop) const override;

 private:
  std::shared_ptr<const UpstreamTls> tls_;
  std::unordered_map<std::string, ResolveOverride> resolve_;
};

}  // namespace sandgate::proxy
