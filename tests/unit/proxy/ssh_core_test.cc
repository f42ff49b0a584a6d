// The SSH broker's pure parts (proxy/ssh/): the git exec command an attacker may send, and the
// known_hosts pins. The sessions themselves are in tests/integration/test_ssh_broker.py.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "proxy/ssh/git_command.h"
#include "proxy/ssh/host_keys.h"
#include "proxy/ssh/ssh_session.h"

namespace sandgate::proxy::ssh {
namespace {

TEST(SshGitCommand, GitsOwnCommandsAreNormalised) {
  std::string why;
  auto c = parseGitCommand("git-upload-pack '/Acme/Widgets.git'", &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->service, GitService::kUploadPack);
  EXPECT_EQ(c->repository, "acme/widgets");
  EXPECT_EQ(c->upstreamCommand(), "git-upload-pack 'Acme/Widgets.git'");
  c = parseGitCommand("git-receive-pack 'acme/widgets'", &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->service, GitService::kReceivePack);
  EXPECT_EQ(c->repository, "acme/widgets");
  c = parseGitCommand("git-upload-archive 'org/.github.git'", &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->repository, "org/.github");
  // A working tree's git directory names the tree's repository, as git opens it; found by
  // git_wire_fuzz, which read "kregpor/.git" as a repository "kregpor/" that no rule names.
  for (const char* path : {"acme/widgets/.git", "/acme/widgets/.git/", "acme/widgets.git/.git"}) {
    c = parseGitCommand(std::string("git-receive-pack '") + path + "'", &why);
    ASSERT_TRUE(c) << path << ": " << why;
    EXPECT_EQ(c->repository, "acme/widgets") << path;
    EXPECT_EQ(c->path, path);
  }
  // ".git" goes only where a plain name is left: "..git" is a repository of that name, not ".".
  c = parseGitCommand("git-receive-pack 'acme/..GIt'", &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->repository, "acme/..git");
}

TEST(SshGitCommand, AnythingElseIsRefused) {
  for (const char* cmd : {
           "id",
           "",
           "git-upload-pack",
           "git-upload-pack ''",
           "git upload-pack 'a/b'",
           "git-upload-pack 'a/b'; id",
           "git-upload-pack 'a/b' && id",
           "git-upload-pack 'a/b' 'c/d'",
           "git-upload-pack $(id)",
           "git-upload-pack `id`",
           "git-upload-pack 'a/b\nid'",
           "git-upload-pack 'a/../b'",
           "git-upload-pack '../a/b'",
           "git-upload-pack './a/b'",
           "git-upload-pack 'a//b'",
           "git-upload-pack '--upload-pack=id'",
           "git-upload-pack 'a/-b'",
           "git-upload-pack '~/a'",
           "git-upload-pack 'a/b%2f..'",
           "git-upload-pack 'a/b\\'",
           "git-upload-pack \"a/b\"",
           "git-upload-pack 'a/b' > /tmp/x",
           "git-upload-pack  'a/b'",
           "GIT-UPLOAD-PACK 'a/b'",
           "git-upload-pack '.git'",
           "git-upload-pack '/.git/'",
       }) {
    std::string why;
    EXPECT_FALSE(parseGitCommand(cmd, &why)) << cmd;
  }
}

constexpr const char* kKey =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN5/JW31Z5sevtaqMK7a5ifmxJJcd0yPX9ajF9F0Nayj";

TEST(SshKnownHosts, PinsPerHostAndPort) {
  auto k = parseKnownHosts(std::string("# comment\ngit.example.com,Alias.example ") + kKey +
                               "\n[git.example.com]:2222 " + kKey + "\n",
                           "kh");
  ASSERT_TRUE(k) << k.errorText();
  EXPECT_EQ(k->keysFor("GIT.example.com", 22).size(), 1u);
  EXPECT_EQ(k->keysFor("alias.example", 22).size(), 1u);
  EXPECT_EQ(k->keysFor("git.example.com", 2222).size(), 1u);
  EXPECT_TRUE(k->keysFor("git.example.com", 2200).empty());
  EXPECT_TRUE(k->keysFor("other.example", 22).empty());
}

TEST(SshKnownHosts, WhatCannotBePinnedIsAnError) {
  for (std::string line : {
           std::string("|1|abc=|def= ") + kKey,
           std::string("@cert-authority *.example.com ") + kKey,
           std::string("*.example.com ") + kKey,
           std::string("git.example.com ssh-ed25519 notbase64"),
           std::string("git.example.com"),
       }) {
    auto k = parseKnownHosts(line + "\n", "kh");
    EXPECT_FALSE(k) << line;
    if (!k) {
      EXPECT_NE(k.errorText().find("kh:1"), std::string::npos) << k.errorText();
    }
  }
}

TEST(SshHostKey, GeneratedKeyHasAPublicLine) {
  auto k = HostKey::generate();
  ASSERT_TRUE(k) << k.errorText();
  EXPECT_TRUE((*k)->publicLine().starts_with("ssh-ed25519 AAAA"));
}

size_t openDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// runSession leaves the caller's descriptors to the caller (ssh_session.h: "not closed here")
// and closes what it opened. libssh closes the descriptor a server session was accepted on;
// given the caller's own, the caller's later close hit a number that another thread may have
// opened meanwhile (the broker's threads each close theirs after the session).
TEST(SshSession, TheCallersDescriptorsStayTheCallers) {
  auto key = HostKey::generate();
  ASSERT_TRUE(key) << key.errorText();
  for (std::string_view client : {std::string_view("garbage\r\n"),
                                  std::string_view("SSH-2.0-OpenSSH_9.2\r\n")}) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    // The client says this much and leaves: the key exchange fails at once.
    ASSERT_EQ(::write(sv[1], client.data(), client.size()), static_cast<ssize_t>(client.size()));
    ::shutdown(sv[1], SHUT_WR);
    const size_t before = openDescriptors();
    SessionParams p;
    p.clientFd = sv[0];
    p.hostKey = *key;
    p.handshakeTimeout = std::chrono::milliseconds(2000);
    SessionResult r = runSession(p);
    EXPECT_FALSE(r.reason.empty()) << client;
    EXPECT_NE(::fcntl(sv[0], F_GETFD), -1) << "the caller's descriptor was closed: " << client;
    EXPECT_EQ(openDescriptors(), before) << "a descriptor was left open: " << client;
    ::close(sv[0]);
    ::close(sv[1]);
  }
}

}  // namespace
}  // namespace sandgate::proxy::ssh
