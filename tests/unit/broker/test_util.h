// Helpers shared by the broker tests: a per-test temporary directory, file writing, bounded
// polling, and credential structs built in code.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "config/config.h"

namespace sandgate::broker::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sandgate-broker-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void writeFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

// Writes to a temporary name and renames over `path` (a new inode: Kubernetes-style rotation).
inline void replaceFile(const std::string& path, const std::string& content) {
  writeFile(path + ".new", content);
  std::filesystem::rename(path + ".new", path);
}

// A Kubernetes Secret volume in `dir` holding `key`: dir/<key> -> ..data/<key>, and ..data ->
// ..<stamp>, the directory with the file.
inline void makeSecretVolume(const std::string& dir, const std::string& key,
                             const std::string& stamp, const std::string& content) {
  std::filesystem::create_directory(dir + "/.." + stamp);
  writeFile(dir + "/.." + stamp + "/" + key, content);
  std::filesystem::create_directory_symlink(".." + stamp, dir + "/..data");
  std::filesystem::create_symlink("..data/" + key, dir + "/" + key);
}

// Kubernetes' update of such a volume: the new files in a new ..<stamp> directory, then a new
// ..data link renamed over the old one.
inline void rotateSecretVolume(const std::string& dir, const std::string& key,
                               const std::string& stamp, const std::string& content) {
  std::filesystem::create_directory(dir + "/.." + stamp);
  writeFile(dir + "/.." + stamp + "/" + key, content);
  std::filesystem::create_directory_symlink(".." + stamp, dir + "/..data_tmp");
  std::filesystem::rename(dir + "/..data_tmp", dir + "/..data");
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Polls `done` every 10 ms until it holds or `limit` passes; returns whether it held.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

inline config::Credential headerCredential(const std::string& name, config::CredentialSource src,
                                           std::vector<std::string> hosts) {
  config::Credential c;
  c.name = name;
  c.mark = {3, 3};
  c.source = std::move(src);
  c.source.mark = {4, 13};
  for (auto& h : hosts) c.hosts.push_back({h, {}});
  c.inject.kind = config::Injection::Kind::kHeader;
  c.inject.header = "Authorization";
  c.inject.value = "Bearer {secret}";
  return c;
}

inline config::CredentialSource fileSource(const std::string& path) {
  config::CredentialSource s;
  s.kind = config::CredentialSource::Kind::kFile;
  s.file = path;
  return s;
}
inline config::CredentialSource envSource(const std::string& name) {
  config::CredentialSource s;
  s.kind = config::CredentialSource::Kind::kEnv;
  s.env = name;
  return s;
}
inline config::CredentialSource execSource(std::vector<std::string> argv, double ttlSeconds) {
  config::CredentialSource s;
  s.kind = config::CredentialSource::Kind::kExec;
  s.exec = std::move(argv);
  s.ttl = config::Seconds(ttlSeconds);
  return s;
}

// One header credential, `name`, read from the file at `path` (host a.example): the
// configuration of the tests that load, rotate and drop a file secret.
inline config::Credentials fileCredential(const std::string& name, const std::string& path) {
  config::Credentials creds;
  creds[name] = headerCredential(name, fileSource(path), {"a.example"});
  return creds;
}

}  // namespace sandgate::broker::testing
