// The sandbox's network: loopback up, and the proxy's listening sockets bound inside it.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sandgate::sandbox {

// Sandbox side, in the new network namespace. Brings `lo` up (SIOCSIFFLAGS) — the namespace has
// no other interface and no route, so any other destination fails at once with ENETUNREACH —
// then binds and listens on 127.0.0.1:port and [::1]:port. IPv6 being unavailable is a warning.
// Throws SetupError; returns the listening descriptors (close-on-exec).
std::vector<int> setUpNetwork(uint16_t port, std::vector<std::string>* warnings);

// A close-on-exec socket of `type` bound to `addr` (SO_REUSEADDR; IPv6 sockets V6ONLY), listening
// too when `listenToo`. -1 with errno on failure, and *call names the system call that failed.
int bindSocket(int type, const sockaddr* addr, socklen_t len, bool listenToo, std::string* call);

}  // namespace sandgate::sandbox
