// The control channel between the launcher and its sandbox processes: small typed datagrams
// over a SOCK_SEQPACKET socketpair, optionally carrying file descriptors (SCM_RIGHTS).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sandgate::sandbox {

enum class MsgType : uint32_t {
  kGo = 1,       // launcher → sandbox: the step the child waits for is done
  kUnshared,     // outer child → launcher: namespaces created, write the id maps
  kInitPid,      // outer child → launcher: value = host pid of the sandbox's PID 1
  kListeners,    // init → launcher: the listening sockets (SCM_RIGHTS)
  kWarning,      // any → launcher: text to log; the run goes on
  kSetupError,   // any → launcher: text names step, call and errno; the run is over
  kExecError,    // command → launcher: value = exit status (126/127), text = reason
  kCommandExit,  // init → launcher: value = wait status of the command
  kInitExit,     // outer child → launcher: value = wait status of the sandbox's PID 1
  kCapture,      // init → launcher, before kListeners: DNS UDP, DNS TCP, capture listeners
                 // (SCM_RIGHTS, in that order); value bit 0 = IPv6 capture is routed
  kExecWatch,    // command → launcher, before its exec: the seccomp notification descriptor
};

struct Message {
  MsgType type = MsgType::kGo;
  int32_t value = 0;
  std::string text;
  std::vector<int> fds;  // received descriptors; the receiver owns them
};

// Sends one datagram. Returns false with errno set on failure. Never raises SIGPIPE.
bool sendMessage(int fd, MsgType type, int32_t value = 0, const std::string& text = {},
                 const std::vector<int>& fds = {});

enum class RecvStatus { kMessage, kEof, kTimeout, kError };

// Waits up to `timeoutMs` (-1 = forever) for one datagram. kError leaves errno set.
RecvStatus receiveMessage(int fd, int timeoutMs, Message* out);

}  // namespace sandgate::sandbox
