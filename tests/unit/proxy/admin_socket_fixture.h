// What the admin socket tests share (admin_socket_test.cc, admin_socket_peers_test.cc): a
// temporary directory, a fake backend recording what the socket asked of it, and opening a
// socket on it.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "broker/placeholder.h"
#include "proxy/admin/admin_socket.h"
#include "proxy/observe/listener_tally.h"

namespace sandgate::proxy::admin_test {

// Polls `pred` for up to 5 s.
template <typename Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sandgate-admin-XXXXXX";
    path_ = ::mkdtemp(tmpl);
    ::chmod(path_.c_str(), 0755);  // the uid 65534 children must reach the socket
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A backend that records what the admin socket asked of it.
struct FakeBackend {
  std::mutex mu;
  std::vector<std::string> adoptedTasks;  // guarded by mu
  std::vector<uint64_t> released;         // guarded by mu
  std::vector<int> heldFds;               // guarded by mu
  std::shared_ptr<ListenerTally> tally;   // the last adopt's; guarded by mu
  // Every task_env's run placeholders, and what each adopt was given; guarded by mu.
  std::vector<std::shared_ptr<const broker::PlaceholderSet>> made;
  std::vector<std::shared_ptr<const broker::PlaceholderSet>> adoptedWith;

  AdminBackend backend() {
    AdminBackend b;
    b.environment = [this](const std::string& task) -> Expected<RunEnvironment> {
      if (task != "t1") return Error{"unknown_task", "no task '" + task + "'"};
      std::lock_guard lock(mu);
      auto set = std::make_shared<const broker::PlaceholderSet>(std::vector<broker::Placeholder>{
          {"key", "KEY", "placeholder-" + std::to_string(made.size())}});
      made.push_back(set);
      return RunEnvironment{
          TaskEnvironment{
              "p", "PEM", {{"KEY", set->all()[0].value}}, {"/secret"}, std::nullopt, std::nullopt},
          set};
    };
    b.tokenEnvironment = [](const std::string& task) -> Expected<TaskEnvironment> {
      if (task != "t1") return Error{"unknown_task", "no task '" + task + "'"};
      return TaskEnvironment{"p", "PEM",        {{"KEY", "token-placeholder"}},
                             {},  std::nullopt, std::nullopt};
    };
    b.adopt =
        [this](std::vector<int> fds, const std::string& task, std::shared_ptr<ListenerTally> t,
               std::shared_ptr<const broker::PlaceholderSet> placeholders) -> Expected<uint64_t> {
      std::lock_guard lock(mu);
      tally = std::move(t);
      adoptedWith.push_back(std::move(placeholders));
      adoptedTasks.push_back(task);
      heldFds.insert(heldFds.end(), fds.begin(), fds.end());
      return uint64_t{adoptedTasks.size()};
    };
    b.release = [this](uint64_t h) {
      std::lock_guard lock(mu);
      released.push_back(h);
    };
    return b;
  }
  size_t releasedCount() {
    std::lock_guard lock(mu);
    return released.size();
  }
  ~FakeBackend() {
    for (int fd : heldFds) ::close(fd);
  }
};

inline std::unique_ptr<AdminSocket> openOrDie(const std::string& path, FakeBackend& fake,
                                              std::optional<gid_t> group = std::nullopt) {
  AdminSocketOptions o;
  o.path = path;
  o.group = group;
  auto s = AdminSocket::open(o, fake.backend());
  EXPECT_TRUE(s.ok()) << s.errorText();
  if (!s) return nullptr;
  s.value()->start();
  return std::move(s.value());
}

}  // namespace sandgate::proxy::admin_test
