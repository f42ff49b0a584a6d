// Transparent capture of one sandbox: its DNS stub (UDP and TCP 127.0.0.53:53 handed over by
// the launcher), the synthetic address pool shared with its capture listeners, and counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capture/address_pool.h"
#include "capture/dns_responder.h"
#include "common/result.h"
#include "config/config.h"
#include "proxy/state/capture_config.h"

namespace sandgate::proxy {

struct ServerState;
class ListenerTally;

struct CaptureOptions {
  std::string task;
  std::vector<uint16_t> ports = {80, 443};  // the capture listeners' ports
  policy::Cidr v4 = capture::defaultPoolV4();
  policy::Cidr v6 = capture::defaultPoolV6();
  bool ipv6 = true;  // answer AAAA (the sandbox has an IPv6 capture listener)
};

// Descriptors handed over by the launcher (ownership passes to Server::adoptCapture).
struct CaptureSockets {
  int dnsUdp = -1;
  int dnsTcp = -1;
  std::vector<int> listeners;  // listening TCP sockets on the capture ports

  void close();  // closes every descriptor still held (error paths)
};

class CaptureContext;

// A capture as a server serves it (Server::adoptCapture).
struct AdoptedCapture {
  std::shared_ptr<CaptureContext> context;
  uint64_t group = 0;  // for Server::releaseListeners
};

// Queries by result (the dns_result tokens) since the context was created.
struct CaptureCounts {
  uint64_t answered = 0, nodata = 0, nxdomain = 0, refused = 0, notimp = 0, exhausted = 0,
           malformed = 0;
  uint64_t names = 0;  // synthetic addresses handed out
  // For names answered NXDOMAIN that the policy allows on a port the sandbox does not capture:
  // "NAME: the policy allows it on port P, which is not captured: add `--capture-port P`"
  // (the first kMaxHints names).
  std::vector<std::string> hints{};
  static constexpr size_t kMaxHints = 20;
  uint64_t queries() const;     // every query, whatever its result
  std::string summary() const;  // "3 answered, 1 nxdomain, ..." for the run's stderr
};

// Shared by the DNS servers and the capture listeners of one sandbox; thread-safe.
class CaptureContext {
 public:
  // `tally` set: the DNS audit records are counted there too (a run served by `sandgate
  // serve`, whose report sums the run's records like the embedded proxy's does).
  CaptureContext(CaptureOptions options, ServerState& state,
                 std::shared_ptr<ListenerTally> tally = nullptr);

  const CaptureOptions& options() const { return options_; }
  capture::SyntheticPool& pool() { return *pool_; }
  // Answers one query (and counts it); `client` and `listener` are for the audit line.
  capture::DnsOutcome answer(std::span<const uint8_t> message, bool tcp, const std::string& client,
                             const std::string& listener);
  CaptureCounts counts() const;

 private:
  void count(std::string_view result);
  // The capture hint for `name`, answered NXDOMAIN: "" when no port of the policy would allow
  // it either (see CaptureCounts::hints).
  std::string captureHint(const std::string& name);

  CaptureOptions options_;
  ServerState& state_;
  std::shared_ptr<ListenerTally> tally_;
  std::shared_ptr<capture::SyntheticPool> pool_;
  capture::DnsResponder responder_;
  std::atomic<uint64_t> answered_{0}, nodata_{0}, nxdomain_{0}, refused_{0}, notimp_{0},
      exhausted_{0}, malformed_{0};
  mutable std::mutex hintsMutex_;
  std::vector<std::string> hints_;  // guarded by hintsMutex_
};

}  // namespace sandgate::proxy
