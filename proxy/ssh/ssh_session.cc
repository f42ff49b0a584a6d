// One brokered SSH connection on its own thread (see ssh_session.h): the sandbox's leg as an
// SSH server, the upstream leg as an SSH client, and the relay of one git exec channel.
#include "proxy/ssh/ssh_session.h"

#include <fmt/format.h>
#include <libssh/libssh.h>
#include <libssh/server.h>
#include <openssl/crypto.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>

#include "policy/git_rules.h"
#include "proxy/client/reasons.h"

namespace sandgate::proxy::ssh {
namespace {

// RAII for the libssh handles (each has its own free function).
struct BindFree {
  void operator()(ssh_bind b) const { ssh_bind_free(b); }
};
struct SessionFree {
  void operator()(ssh_session s) const {
    ssh_disconnect(s);
    ssh_free(s);
  }
};
struct ChannelFree {
  void operator()(ssh_channel c) const { ssh_channel_free(c); }
};
struct MessageFree {
  void operator()(ssh_message m) const { ssh_message_free(m); }
};
struct KeyFree {
  void operator()(ssh_key k) const { ssh_key_free(k); }
};
using Bind = std::unique_ptr<ssh_bind_struct, BindFree>;
using Session = std::unique_ptr<ssh_session_struct, SessionFree>;
using Channel = std::unique_ptr<ssh_channel_struct, ChannelFree>;
using Message = std::unique_ptr<ssh_message_struct, MessageFree>;
using Key = std::unique_ptr<ssh_key_struct, KeyFree>;

constexpr int kExitRefused = 1;
// How long a poll waits before the stop flag and the idle clock are looked at again.
constexpr int kPollMs = 200;
// After a refused push: how long the client's pack is drained (so that git reads the report
// rather than a broken pipe), and how much of it.
constexpr auto kDrainTime = std::chrono::seconds(10);
constexpr uint64_t kDrainBytes = uint64_t{1} << 30;

bool stopped(const SessionParams& p) { return p.stop && p.stop->load(std::memory_order_relaxed); }

// Ends a refused channel as git-shell does: the request is granted (a failed request is all
// OpenSSH would print), then the reason on stderr, an exit status, EOF, close.
void refuseOnChannel(ssh_channel ch, std::string_view reason, std::string_view detail) {
  if (!ch) return;
  const std::string msg = fmt::format("sandgate: {} ({})\r\n", detail, reason);
  ssh_channel_write_stderr(ch, msg.data(), static_cast<uint32_t>(msg.size()));
  ssh_channel_request_send_exit_status(ch, kExitRefused);
  ssh_channel_send_eof(ch);
  ssh_channel_close(ch);
}

// Waits until either socket is readable (or kPollMs).
void waitReadable(int a, int b) {
  std::array<pollfd, 2> fds{pollfd{a, POLLIN, 0}, pollfd{b, POLLIN, 0}};
  ::poll(fds.data(), b >= 0 ? 2 : 1, kPollMs);
}

// The server leg up to an accepted git exec: returns the channel, or null (result says why).
struct Downstream {
  Session session;
  Channel channel;  // the one session channel
  std::optional<GitCommand> command;
};

void refuse(const SessionParams& p, SessionResult& r, std::string_view reason, std::string detail) {
  if (p.onRefusal) p.onRefusal(SshRefusal{reason, detail});
  r.reason = reason;
  r.detail = std::move(detail);
}

// A channel the client may not open: a second session channel, or a forwarding of any kind.
SshRefusal channelOpenRefusal(int sub) {
  switch (sub) {
    case SSH_CHANNEL_SESSION:
      return {reason::kSshChannelLimit, "one session channel per connection"};
    case SSH_CHANNEL_X11:
      return {reason::kSshX11Refused, "X11 forwarding is not served"};
    case SSH_CHANNEL_AUTH_AGENT:
      return {reason::kSshAgentRefused, "agent forwarding is not served"};
    default:
      return {reason::kSshForwardingRefused, "port forwarding is not served"};
  }
}

// After the one git command was accepted, whatever else the client asks on the connection (a
// second channel, a second exec on the channel, a shell, a pty, a forwarding) is refused at
// once with an audit line: the broker checked one command and one repository, and a request
// left unanswered in libssh's queue would hold the client (or be answered by someone later).
int refuseAfterExec(ssh_session, ssh_message msg, void* data) {
  const auto& p = *static_cast<const SessionParams*>(data);
  const int type = ssh_message_type(msg);
  const int sub = ssh_message_subtype(msg);
  std::optional<SshRefusal> refusal;
  if (type == SSH_REQUEST_CHANNEL_OPEN) {
    refusal = channelOpenRefusal(sub);
  } else if (type == SSH_REQUEST_GLOBAL) {
    if (sub == SSH_GLOBAL_REQUEST_TCPIP_FORWARD) {
      refusal = SshRefusal{reason::kSshForwardingRefused, "remote port forwarding"};
    }
  } else if (type == SSH_REQUEST_CHANNEL) {
    switch (sub) {
      case SSH_CHANNEL_REQUEST_EXEC:
      case SSH_CHANNEL_REQUEST_SHELL:
      case SSH_CHANNEL_REQUEST_SUBSYSTEM:
        refusal = SshRefusal{reason::kSshCommandRefused,
                             "a second command on a connection that runs one git command"};
        break;
      case SSH_CHANNEL_REQUEST_PTY:
        refusal = SshRefusal{reason::kSshPtyRefused, "no terminal is served"};
        break;
      case SSH_CHANNEL_REQUEST_ENV:
        refusal = SshRefusal{reason::kSshEnvRefused, "environment not passed"};
        break;
      case SSH_CHANNEL_REQUEST_X11:
        refusal = SshRefusal{reason::kSshX11Refused, "X11 is not served"};
        break;
      case SSH_CHANNEL_REQUEST_WINDOW_CHANGE:
        break;
      default:
        refusal = SshRefusal{reason::kSshRequestRefused, "channel request not served"};
    }
  }
  if (refusal && p.onRefusal) p.onRefusal(*refusal);
  return 1;  // libssh sends the default reply: a failure where one is wanted
}

// Handles one message before the exec. Returns false when the session is over.
bool handleMessage(const SessionParams& p, Downstream& d, SessionResult& r, ssh_message msg) {
  const int type = ssh_message_type(msg);
  const int sub = ssh_message_subtype(msg);
  if (type == SSH_REQUEST_AUTH) {
    // The task is the CONNECT's identity; this leg only has to let the client in: `none` or
    // any public key (even its unsigned probe) succeeds. Password and keyboard-interactive
    // are not offered (nothing the sandbox types should be asked for).
    if (sub == SSH_AUTH_METHOD_NONE || sub == SSH_AUTH_METHOD_PUBLICKEY) {
      ssh_message_auth_reply_success(msg, 0);
    } else {
      ssh_message_auth_set_methods(msg, SSH_AUTH_METHOD_NONE | SSH_AUTH_METHOD_PUBLICKEY);
      ssh_message_reply_default(msg);
    }
    return true;
  }
  if (type == SSH_REQUEST_CHANNEL_OPEN) {
    if (sub == SSH_CHANNEL_SESSION && !d.channel) {
      d.channel.reset(ssh_message_channel_request_open_reply_accept(msg));
      return d.channel != nullptr;
    }
    if (p.onRefusal) p.onRefusal(channelOpenRefusal(sub));
    ssh_message_reply_default(msg);
    return true;
  }
  if (type == SSH_REQUEST_GLOBAL) {
    if (sub == SSH_GLOBAL_REQUEST_TCPIP_FORWARD || sub == SSH_GLOBAL_REQUEST_CANCEL_TCPIP_FORWARD) {
      if (p.onRefusal) {
        p.onRefusal(SshRefusal{reason::kSshForwardingRefused, "remote port forwarding"});
      }
    }
    ssh_message_reply_default(msg);
    return true;
  }
  if (type != SSH_REQUEST_CHANNEL) {
    ssh_message_reply_default(msg);
    return true;
  }
  ssh_channel ch = ssh_message_channel_request_channel(msg);
  switch (sub) {
    case SSH_CHANNEL_REQUEST_PTY:
      if (p.onRefusal) p.onRefusal(SshRefusal{reason::kSshPtyRefused, "no terminal is served"});
      ssh_message_reply_default(msg);
      return true;
    case SSH_CHANNEL_REQUEST_ENV:
      // OpenSSH sends LANG and git GIT_PROTOCOL; refused, the session goes on (git falls back
      // to protocol v0, whose push command list the gate reads).
      if (p.onRefusal) p.onRefusal(SshRefusal{reason::kSshEnvRefused, "environment not passed"});
      ssh_message_reply_default(msg);
      return true;
    case SSH_CHANNEL_REQUEST_WINDOW_CHANGE:
      ssh_message_reply_default(msg);
      return true;
    case SSH_CHANNEL_REQUEST_SHELL:
      ssh_message_channel_request_reply_success(msg);
      refuse(p, r, reason::kSshShellRefused, "only git commands are served, not a shell");
      refuseOnChannel(ch, r.reason, r.detail);
      return false;
    case SSH_CHANNEL_REQUEST_SUBSYSTEM: {
      const char* name = ssh_message_channel_request_subsystem(msg);
      ssh_message_channel_request_reply_success(msg);
      refuse(p, r, reason::kSshSubsystemRefused,
             fmt::format("subsystem {} is not served", name ? name : "?"));
      refuseOnChannel(ch, r.reason, r.detail);
      return false;
    }
    case SSH_CHANNEL_REQUEST_X11:
      if (p.onRefusal) p.onRefusal(SshRefusal{reason::kSshX11Refused, "X11 is not served"});
      ssh_message_reply_default(msg);
      return true;
    case SSH_CHANNEL_REQUEST_EXEC: {
      const char* raw = ssh_message_channel_request_command(msg);
      std::string why;
      auto cmd = parseGitCommand(raw ? std::string_view(raw) : std::string_view(), &why);
      if (!cmd) {
        ssh_message_channel_request_reply_success(msg);
        refuse(p, r, reason::kSshCommandRefused, why);
        refuseOnChannel(ch, r.reason, r.detail);
        return false;
      }
      r.service = std::string(serviceName(cmd->service));
      r.repository = cmd->repository;
      GitVerdict v = p.decideCommand ? p.decideCommand(*cmd) : GitVerdict{};
      if (!v.allowed) {
        ssh_message_channel_request_reply_success(msg);
        refuse(p, r, v.reason, v.detail);
        refuseOnChannel(ch, r.reason, r.detail);
        return false;
      }
      ssh_message_channel_request_reply_success(msg);
      d.command = std::move(cmd);
      return true;
    }
    default:
      // auth-agent-req@openssh.com (ssh -A) among others.
      if (p.onRefusal) {
        p.onRefusal(SshRefusal{reason::kSshRequestRefused, "channel request not served"});
      }
      ssh_message_reply_default(msg);
      return true;
  }
}

Downstream acceptDownstream(const SessionParams& p, SessionResult& r) {
  Downstream d;
  Bind bind(ssh_bind_new());
  d.session.reset(ssh_new());
  if (!bind || !d.session || !p.hostKey) {
    r.reason = reason::kSshProtocolError;
    r.detail = "cannot set up the SSH server";
    return d;
  }
  int no = 0;
  ssh_bind_options_set(bind.get(), SSH_BIND_OPTIONS_PROCESS_CONFIG, &no);
  // The bind owns the key it is given: a duplicate of the shared one.
  ssh_bind_options_set(bind.get(), SSH_BIND_OPTIONS_IMPORT_KEY, p.hostKey->duplicate());
  long timeout = static_cast<long>(std::max<int64_t>(1, p.handshakeTimeout.count() / 1000));
  ssh_options_set(d.session.get(), SSH_OPTIONS_TIMEOUT, &timeout);
  // libssh closes the descriptor a server session was accepted on when the session is freed,
  // and the caller closes p.clientFd when this returns: libssh gets its own duplicate. Closing
  // one number twice would, the second time, close whatever another thread had opened under
  // that number meanwhile (another task's connection).
  const int ownFd = ::fcntl(p.clientFd, F_DUPFD_CLOEXEC, 0);
  if (ownFd < 0) {
    r.reason = reason::kSshProtocolError;
    r.detail = "cannot set up the SSH server";
    return d;
  }
  const bool accepted = ssh_bind_accept_fd(bind.get(), d.session.get(), ownFd) == SSH_OK;
  // A failure before libssh took the descriptor leaves it ours to close.
  if (!accepted && ssh_get_fd(d.session.get()) != ownFd) ::close(ownFd);
  if (!accepted || ssh_handle_key_exchange(d.session.get()) != SSH_OK) {
    r.reason = reason::kSshProtocolError;
    r.detail =
        fmt::format("SSH handshake with the client failed: {}", ssh_get_error(d.session.get()));
    d.session.reset();
    return d;
  }
  const auto deadline = std::chrono::steady_clock::now() + p.handshakeTimeout;
  while (!d.command && !stopped(p)) {
    if (std::chrono::steady_clock::now() > deadline) {
      r.reason = reason::kSshProtocolError;
      r.detail = "no git command within the handshake timeout";
      break;
    }
    Message msg(ssh_message_get(d.session.get()));
    if (!msg) {
      if (r.reason.empty()) {
        r.reason = reason::kClientClosed;
        r.detail = "the client ended the session before a git command";
      }
      break;
    }
    if (!handleMessage(p, d, r, msg.get())) break;
  }
  if (d.command) {
    // From here on every message goes to refuseAfterExec, those already queued included.
    ssh_set_message_callback(d.session.get(), refuseAfterExec, const_cast<SessionParams*>(&p));
    ssh_execute_message_callbacks(d.session.get());
  }
  return d;
}

// The upstream leg: connect on the dialled socket, check the pinned key, log in, exec.
Session connectUpstream(const SessionParams& p, const GitCommand& cmd, SessionResult& r,
                        Channel* channel) {
  Session s(ssh_new());
  if (!s) return nullptr;
  socket_t fd = p.upstreamFd;
  int no = 0;
  long timeout = static_cast<long>(std::max<int64_t>(1, p.handshakeTimeout.count() / 1000));
  // No config file, no known_hosts file: nothing on this host's disk (root's ~/.ssh/config,
  // a ProxyCommand) may change where or how this leg goes; the pins are checked below.
  ssh_options_set(s.get(), SSH_OPTIONS_PROCESS_CONFIG, &no);
  ssh_options_set(s.get(), SSH_OPTIONS_FD, &fd);
  ssh_options_set(s.get(), SSH_OPTIONS_HOST, p.upstreamHost.c_str());
  ssh_options_set(s.get(), SSH_OPTIONS_USER, p.user.c_str());
  ssh_options_set(s.get(), SSH_OPTIONS_TIMEOUT, &timeout);
  ssh_options_set(s.get(), SSH_OPTIONS_KNOWNHOSTS, "/dev/null");
  ssh_options_set(s.get(), SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
  // Negotiate a host key type that is pinned, so that a host with several keys shows one we
  // can compare.
  std::string types;
  for (const auto& k : p.pins) {
    if (types.find(k.type) == std::string::npos) types += (types.empty() ? "" : ",") + k.type;
  }
  if (!types.empty()) ssh_options_set(s.get(), SSH_OPTIONS_HOSTKEYS, types.c_str());
  if (ssh_connect(s.get()) != SSH_OK) {
    r.reason = reason::kUpstreamSshFailed;
    r.detail =
        fmt::format("SSH handshake with {} failed: {}", p.upstreamHost, ssh_get_error(s.get()));
    return nullptr;
  }
  ssh_key raw = nullptr;
  std::string blob;
  if (ssh_get_server_publickey(s.get(), &raw) == SSH_OK) {
    Key key(raw);
    char* b64 = nullptr;
    if (ssh_pki_export_pubkey_base64(key.get(), &b64) == SSH_OK) {
      blob = b64;
      ssh_string_free_char(b64);
    }
  }
  const bool pinned = !blob.empty() && std::any_of(p.pins.begin(), p.pins.end(),
                                                   [&](const auto& k) { return k.blob == blob; });
  if (!pinned) {
    r.reason = reason::kUpstreamHostKeyMismatch;
    r.detail = p.pins.empty()
                   ? fmt::format("no host key of {} is pinned in the credential's known_hosts",
                                 p.upstreamHost)
                   : fmt::format("the host key of {} is not one the credential's known_hosts pins",
                                 p.upstreamHost);
    return nullptr;
  }
  std::string why;
  std::string secret = p.privateKey ? p.privateKey(&why) : std::string();
  ssh_key priv = nullptr;
  const int imported = secret.empty() ? SSH_ERROR
                                      : ssh_pki_import_privkey_base64(secret.c_str(), nullptr,
                                                                      nullptr, nullptr, &priv);
  OPENSSL_cleanse(secret.data(), secret.size());
  if (imported != SSH_OK) {
    r.reason = reason::kUpstreamAuthFailed;
    r.detail = why.empty() ? "the credential is not an unencrypted OpenSSH private key" : why;
    return nullptr;
  }
  Key privKey(priv);
  if (ssh_userauth_publickey(s.get(), nullptr, privKey.get()) != SSH_AUTH_SUCCESS) {
    r.reason = reason::kUpstreamAuthFailed;
    r.detail = fmt::format("{} refused the credential's key for user {}", p.upstreamHost, p.user);
    return nullptr;
  }
  privKey.reset();
  channel->reset(ssh_channel_new(s.get()));
  const std::string command = cmd.upstreamCommand();
  if (!*channel || ssh_channel_open_session(channel->get()) != SSH_OK ||
      ssh_channel_request_exec(channel->get(), command.c_str()) != SSH_OK) {
    r.reason = reason::kUpstreamSshFailed;
    r.detail =
        fmt::format("{} refused the git command: {}", p.upstreamHost, ssh_get_error(s.get()));
    channel->reset();
    return nullptr;
  }
  return s;
}

// The push gate: buffers what the client sends until the command list is complete, then
// either releases it upstream or answers with report-status `ng` lines.
class PushGate {
 public:
  enum class State { kReading, kPassed, kRefused };
  PushGate(const SessionParams& p, SessionResult& r) : p_(p), r_(r) {}

  // Feeds client bytes; returns the bytes to send upstream now (empty while reading).
  std::string feed(std::string_view data, ssh_channel client) {
    if (state_ == State::kPassed) return std::string(data);
    if (state_ == State::kRefused) return {};
    buffer_.append(data);
    auto push = policy::parsePushCommands(buffer_, p_.maxCommandListBytes);
    if (push.status == policy::PushCommands::Status::kNeedMore) return {};
    if (push.status == policy::PushCommands::Status::kProtocolError) {
      std::vector<std::string> none;
      refuse(client, push, none, policy::reason::kGitProtocolError, push.error);
      return {};
    }
    for (const auto& c : push.commands) r_.refs.push_back(c.ref);
    PushVerdict v = p_.decidePush ? p_.decidePush(push) : PushVerdict{};
    r_.verdicts = v.verdicts;
    if (v.refused) {
      refuse(client, push, v.why, v.reason, v.detail);
      return {};
    }
    state_ = State::kPassed;
    return std::move(buffer_);
  }
  State state() const { return state_; }

 private:
  void refuse(ssh_channel client, const policy::PushCommands& push,
              const std::vector<std::string>& why, std::string_view reason,
              const std::string& detail) {
    state_ = State::kRefused;
    r_.reason = reason;
    r_.detail = detail;
    if (p_.onRefusal) p_.onRefusal(SshRefusal{reason, detail});
    const std::string body = policy::receivePackRefusal(
        push, why, fmt::format("push to {} refused: {}", r_.repository, detail));
    ssh_channel_write(client, body.data(), static_cast<uint32_t>(body.size()));
    buffer_.clear();
  }

  const SessionParams& p_;
  SessionResult& r_;
  State state_ = State::kReading;
  std::string buffer_;
};

// Writes all of `data`: libssh returns a short count when the peer's window stayed shut for
// the session's timeout (a client busy indexing a pack), and the rest of the chunk must not be
// dropped from the stream. Gives up on an error, a stop, or a peer whose window stays shut for
// the idle timeout.
bool writeAll(const SessionParams& p, ssh_channel ch, const char* data, size_t n, bool isStderr) {
  const auto deadline = std::chrono::steady_clock::now() + p.idleTimeout;
  while (n > 0) {
    if (stopped(p) || std::chrono::steady_clock::now() > deadline) return false;
    const auto len = static_cast<uint32_t>(n);
    const int w =
        isStderr ? ssh_channel_write_stderr(ch, data, len) : ssh_channel_write(ch, data, len);
    if (w == SSH_ERROR || w < 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void relay(const SessionParams& p, ssh_channel client, ssh_channel up, ssh_session upSession,
           bool isPush, SessionResult& r) {
  std::optional<PushGate> gate;
  if (isPush) gate.emplace(p, r);
  std::array<char, 32 * 1024> buf{};
  bool clientEof = false;
  auto lastActivity = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drainUntil{};
  uint64_t drained = 0;
  while (!stopped(p)) {
    bool progress = false;
    if (!clientEof) {
      const int n = ssh_channel_read_nonblocking(client, buf.data(), buf.size(), 0);
      if (n == SSH_ERROR) {
        r.reason = reason::kClientClosed;
        break;
      }
      if (n > 0) {
        progress = true;
        std::string_view data(buf.data(), static_cast<size_t>(n));
        std::string out = gate ? gate->feed(data, client) : std::string(data);
        if (gate && gate->state() == PushGate::State::kRefused) {
          if (drainUntil == std::chrono::steady_clock::time_point{}) {
            drainUntil = std::chrono::steady_clock::now() + kDrainTime;
            // Nothing reached the upstream: its receive-pack ends on EOF with no command.
            ssh_channel_send_eof(up);
          }
          drained += static_cast<uint64_t>(n);
        }
        if (!out.empty()) {
          if (!writeAll(p, up, out.data(), out.size(), false)) {
            r.reason = reason::kUpstreamReset;
            break;
          }
          r.bytesUp += out.size();
        }
      } else if (ssh_channel_is_eof(client)) {
        clientEof = true;
        if (!gate || gate->state() == PushGate::State::kPassed) ssh_channel_send_eof(up);
        if (gate && gate->state() == PushGate::State::kReading) {
          // The client ended inside its command list: nothing of it went upstream, and
          // nothing ever will; the upstream's receive-pack ends on our EOF.
          ssh_channel_send_eof(up);
          r.reason = reason::kClientClosed;
          r.detail = "the client ended before its push command list was complete";
          return;
        }
      }
    }
    if (gate && gate->state() == PushGate::State::kRefused) {
      if (clientEof || drained > kDrainBytes || std::chrono::steady_clock::now() > drainUntil) {
        r.exitStatus = 0;  // git reads the report; its own status says the push failed
        return;
      }
      if (!progress) waitReadable(p.clientFd, -1);
      continue;
    }
    for (int isStderr = 0; isStderr <= 1; ++isStderr) {
      const int n = ssh_channel_read_nonblocking(up, buf.data(), buf.size(), isStderr);
      if (n == SSH_ERROR) {
        r.reason = reason::kUpstreamReset;
        return;
      }
      if (n > 0) {
        progress = true;
        if (!writeAll(p, client, buf.data(), static_cast<size_t>(n), isStderr != 0)) {
          r.reason = reason::kClientClosed;
          return;
        }
        r.bytesDown += static_cast<uint64_t>(n);
      }
    }
    if (ssh_channel_is_eof(up)) {
      r.exitStatus = ssh_channel_get_exit_status(up);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress) {
      lastActivity = now;
    } else {
      if (now - lastActivity > p.idleTimeout) {
        r.reason = reason::kIdleTimeout;
        r.detail = "idle timeout";
        return;
      }
      waitReadable(p.clientFd, p.upstreamFd);
    }
    (void)upSession;
  }
  if (stopped(p) && r.reason.empty()) {
    // Only serve's shutdown sets `stop` (a reload's revocation shuts the sockets, and the
    // broker's coroutine then says revoked_by_reload).
    r.reason = reason::kServerStopping;
    r.detail = "serve is stopping";
  }
}

}  // namespace

SessionResult runSession(const SessionParams& p) {
  SessionResult r;
  Downstream d = acceptDownstream(p, r);
  // libssh queues what the socket does not take at once; ssh_disconnect (the session's
  // deleter) closes the socket without sending that queue. So before it, the queue is sent
  // (bounded): otherwise the end of a pack, or a refusal's message, to a client slower than the
  // upstream is lost ("closed by remote host" mid-clone, found by bench/ssh_bench.py).
  struct FlushOnExit {
    ssh_session session;
    int ms;
    ~FlushOnExit() {
      if (session) ssh_blocking_flush(session, ms);
    }
  } flush{d.session.get(), static_cast<int>(p.handshakeTimeout.count())};
  if (!d.session || !d.command) return r;
  // Declared session first: a channel must be freed before the session that owns it.
  Session up;
  Channel upChannel;
  up = connectUpstream(p, *d.command, r, &upChannel);
  if (!up) {
    // Fails closed: the client learns why on stderr, nothing of the key or the host's reply.
    if (p.onRefusal) p.onRefusal(SshRefusal{r.reason, r.detail});
    refuseOnChannel(d.channel.get(), r.reason, r.detail);
    return r;
  }
  r.gitStarted = true;
  // Both legs blocking; the relay polls with nonblocking reads.
  relay(p, d.channel.get(), upChannel.get(), up.get(),
        d.command->service == GitService::kReceivePack, r);
  ssh_channel_request_send_exit_status(d.channel.get(), r.exitStatus >= 0 ? r.exitStatus : 255);
  ssh_channel_send_eof(d.channel.get());
  ssh_channel_close(d.channel.get());
  ssh_channel_close(upChannel.get());
  return r;
}

}  // namespace sandgate::proxy::ssh
