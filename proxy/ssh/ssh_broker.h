// The SSH broker's place in a CONNECT (issue #42): when the admitting rule's credential has
// `ssh:`, the connection is not spliced but served as an SSH server on a session thread
// (ssh_session.h), with the task's git rules, the credential's key and pins, its audit lines.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "policy/engine.h"
#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

// The public line ("ssh-ed25519 AAAA...") of the host key the broker presents under `cfg`: the
// `ssh.host_key` file, else the key this process generated (once, on first use). `sandgate
// run` writes it into the sandbox's known_hosts: its private half never leaves the broker.
Result<std::string> sshBrokerPublicLine(const config::Config& cfg);

// At the server's shutdown, after its grace period and before its event loops stop: tells every
// SSH session to end, shuts its sockets down (so that libssh returns) and waits up to `bound`
// for their threads. Returns how many are still running (0 normally); `*stopped`, how many
// were running when it was called. Sessions that start afterwards end at once.
size_t stopSshSessions(std::chrono::milliseconds bound, size_t* stopped = nullptr);

// The known_hosts text a sandbox of `policy` trusts: "host <public line>" ("[host]:port" off
// port 22) for each host of the policy's allow rules (its includes too) whose credential has
// `ssh:`, on each port the rule allows (22 when it lists none; `re:` hosts cannot be written in
// known_hosts and are left out), naming the key this broker presents under `cfg`.
Result<std::string> sshKnownHostsFor(const config::Config& cfg, const std::string& policy);

// The ports of those hosts (sshKnownHostsFor's): a run captures them too (transparent mode), so
// that a plain `ssh host` without a ProxyCommand reaches the broker with the run's task.
std::vector<uint16_t> sshPortsFor(const config::Config& cfg, const std::string& policy);

// The admitting rule's credential when it is an ssh one (config::Credential::ssh), else null.
const config::Credential* sshCredential(const ClientConnection& c, const policy::Decision& d);

// Serves c (after the CONNECT head, allowed by `decision` for target:port) as the SSH broker
// until the session ends; writes the tunnel's audit line (and one per refusal in it).
boost::asio::awaitable<void> handleSshBroker(ClientConnection& c, const policy::Target& target,
                                             uint16_t port, const policy::Decision& decision,
                                             RequestLog& log);

}  // namespace sandgate::proxy
