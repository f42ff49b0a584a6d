// Test harness for the SSH broker's core (proxy/ssh/ssh_session.h) without the proxy around it:
// listens on a loopback port, and for each connection dials the real sshd on loopback and
// runs one brokered session, deciding git requests with policy::GitRules compiled from the
// flags, as the proxy does. Prints one JSON line per refusal and per ended session on stdout.
// Usage: ssh_session_harness PORT_FILE UPSTREAM_PORT HOST_KEY USER KNOWN_HOSTS KEY_FILE
//        REPO_GLOB [PUSH_REF_GLOB...] (a ref glob of "-" means git.fetch: false, "+archive"
//        git.archive: true)
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "policy/git_rules.h"
#include "proxy/ssh/git_decision.h"
#include "proxy/ssh/ssh_session.h"

using namespace sandgate;

namespace {

std::mutex outMutex;

void emit(const std::string& line) {
  std::lock_guard<std::mutex> lock(outMutex);
  std::cout << line << std::endl;
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int dialLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::cerr << "usage: ssh_session_harness PORT_FILE UPSTREAM_PORT HOST_KEY USER KNOWN_HOSTS "
                 "KEY_FILE REPO_GLOB [PUSH_REF_GLOB...]\n";
    return 2;
  }
  const std::string portFile = argv[1];
  const int upstreamPort = std::stoi(argv[2]);
  auto hostKey = proxy::ssh::HostKey::fromFile(argv[3]);
  if (!hostKey) {
    std::cerr << hostKey.errorText() << "\n";
    return 1;
  }
  const std::string user = argv[4];
  auto known = proxy::ssh::loadKnownHosts(argv[5]);
  if (!known) {
    std::cerr << known.errorText() << "\n";
    return 1;
  }
  const std::string keyFile = argv[6];
  config::GitRules git;
  git.repositories.push_back({argv[7], {}});
  for (int i = 8; i < argc; ++i) {
    if (std::string_view(argv[i]) == "-") {
      git.fetch = false;
      continue;
    }
    if (std::string_view(argv[i]) == "+archive") {
      git.archive = true;
      continue;
    }
    if (!git.push) git.push.emplace();
    git.push->refs.push_back({argv[i], {}});
  }
  auto rules = policy::GitRules::compile(git, "harness", "harness.git");
  if (!rules) {
    std::cerr << rules.errorText() << "\n";
    return 1;
  }
  std::shared_ptr<const policy::GitRules> compiled = *rules;

  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 16) != 0) {
    return 1;
  }
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  {
    std::ofstream(portFile + ".tmp") << ntohs(a.sin_port) << "\n";
    std::rename((portFile + ".tmp").c_str(), portFile.c_str());
  }
  // Bounded: a test makes a handful of connections.
  for (int served = 0; served < 64; ++served) {
    int cfd = ::accept(lfd, nullptr, nullptr);
    if (cfd < 0) break;
    std::thread([=, &known, &hostKey] {
      int ufd = dialLoopback(upstreamPort);
      proxy::ssh::SessionParams p;
      p.clientFd = cfd;
      p.upstreamFd = ufd;
      p.hostKey = *hostKey;
      p.upstreamHost = "127.0.0.1";
      p.user = user;
      p.pins = known->keysFor("127.0.0.1", static_cast<uint16_t>(upstreamPort));
      p.privateKey = [&](std::string*) { return readFile(keyFile); };
      p.decideCommand = [&](const proxy::ssh::GitCommand& cmd) {
        return proxy::ssh::decideGitCommand(compiled.get(), cmd);
      };
      p.decidePush = [&](const policy::PushCommands& push) {
        return proxy::ssh::decideGitPush(compiled.get(), push);
      };
      p.onRefusal = [](const proxy::ssh::SshRefusal& r) {
        emit(fmt::format("{{\"event\": \"refusal\", \"reason\": {}, \"detail\": {}}}",
                         jsonString(r.reason), jsonString(r.detail)));
      };
      // SG_HARNESS_HANDSHAKE_MS: a hostile upstream's test bounds the handshake shorter.
      const char* hs = std::getenv("SG_HARNESS_HANDSHAKE_MS");
      p.handshakeTimeout = std::chrono::milliseconds(hs ? std::atoi(hs) : 10'000);
      p.idleTimeout = std::chrono::seconds(30);
      auto r = proxy::ssh::runSession(p);
      std::string refs;
      for (const auto& ref : r.refs) refs += (refs.empty() ? "" : ", ") + jsonString(ref);
      emit(
          fmt::format("{{\"event\": \"session\", \"reason\": {}, \"detail\": {}, \"service\": {}, "
                      "\"repository\": {}, \"refs\": [{}], \"exit\": {}, \"git\": {}, \"up\": {}, "
                      "\"down\": {}}}",
                      jsonString(r.reason), jsonString(r.detail), jsonString(r.service),
                      jsonString(r.repository), refs, r.exitStatus, r.gitStarted ? "true" : "false",
                      r.bytesUp, r.bytesDown));
      ::close(cfd);
      if (ufd >= 0) ::close(ufd);
    }).detach();
  }
  return 0;
}
