// A hostile SSH client for test_ssh_broker_attacks.py: what OpenSSH's client never does on its
// own, driven with libssh's client against the broker on a loopback port (no host key check:
// the attacker's side does not care whom it talks to). Prints one JSON line per step.
// Usage: ssh_attack_client PORT MODE COMMAND
//   second-channel: exec COMMAND on a channel, then open a second session channel and exec it
//   second-exec:    exec COMMAND on a channel, then a second exec ("id") on the same channel
//   slow:           exec COMMAND, then write stdin one byte per SSH data packet (paced), EOF,
//                   and copy the channel's output to stdout until it ends
#include <fmt/format.h>
#include <libssh/libssh.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>

namespace {

constexpr auto kOverall = std::chrono::seconds(30);

void say(const std::string& step, int rc) {
  std::cout << fmt::format("{{\"step\": \"{}\", \"rc\": {}}}", step, rc) << std::endl;
}

// Copies what the channel has now to stdout (and its stderr to stderr); false at its end.
bool drain(ssh_channel ch) {
  char buf[4096];
  for (int isStderr = 0; isStderr <= 1; ++isStderr) {
    const int n = ssh_channel_read_nonblocking(ch, buf, sizeof buf, isStderr);
    if (n == SSH_ERROR) return false;
    if (n > 0) (isStderr ? std::cerr : std::cout).write(buf, n).flush();
  }
  return !ssh_channel_is_eof(ch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: ssh_attack_client PORT MODE COMMAND\n";
    return 2;
  }
  const int port = std::stoi(argv[1]);
  const std::string mode = argv[2], command = argv[3];
  ssh_session s = ssh_new();
  long timeout = 5;
  int no = 0;
  ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no);
  ssh_options_set(s, SSH_OPTIONS_HOST, "127.0.0.1");
  ssh_options_set(s, SSH_OPTIONS_PORT, &port);
  ssh_options_set(s, SSH_OPTIONS_USER, "git");
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeout);
  ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, "/dev/null");
  if (ssh_connect(s) != SSH_OK) {
    std::cerr << "connect: " << ssh_get_error(s) << "\n";
    return 1;
  }
  say("auth", ssh_userauth_none(s, nullptr));
  ssh_channel ch = ssh_channel_new(s);
  say("open", ssh_channel_open_session(ch));
  say("exec", ssh_channel_request_exec(ch, command.c_str()));
  if (mode == "second-channel") {
    ssh_channel second = ssh_channel_new(s);
    const int rc = ssh_channel_open_session(second);
    say("second-open", rc);
    if (rc == SSH_OK) say("second-exec", ssh_channel_request_exec(second, command.c_str()));
    // The first channel still works: its git command answers (upload-pack's advertisement).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    char buf[4];
    int n = 0;
    while (n == 0 && std::chrono::steady_clock::now() < until) {
      n = ssh_channel_read_timeout(ch, buf, sizeof buf, 0, 1000);
    }
    say("first-reads", n);
  } else if (mode == "second-exec") {
    say("second-exec", ssh_channel_request_exec(ch, "id"));
  } else if (mode == "slow") {
    const std::string input{std::istreambuf_iterator<char>(std::cin), {}};
    const auto until = std::chrono::steady_clock::now() + kOverall;
    for (char c : input) {
      // One SSH_MSG_CHANNEL_DATA per byte, paced so that the broker reads them one by one.
      if (ssh_channel_write(ch, &c, 1) != 1 || std::chrono::steady_clock::now() > until) break;
      drain(ch);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ssh_channel_send_eof(ch);
    while (drain(ch) && std::chrono::steady_clock::now() < until) {
      ssh_channel_poll_timeout(ch, 200, 0);
    }
    drain(ch);
    say("exit", ssh_channel_get_exit_status(ch));
  }
  ssh_channel_free(ch);
  ssh_disconnect(s);
  ssh_free(s);
  return 0;
}
