// Path helpers the launcher's planning shares (lexical comparison, realpath).
#pragma once

#include <string>
#include <vector>

namespace sandgate::sandbox {

// Whether `path` is `dir` or lies below it, compared as text (both absolute and resolved).
bool isUnder(const std::string& path, const std::string& dir);

// realpath(3) of `path`, or "" when it does not resolve.
std::string resolvePath(const std::string& path);

// The path the kernel gives the open descriptor `fd` (readlink of /proc/self/fd/N), or "".
std::string descriptorPath(int fd);

// The names in the directory `dir` (an open descriptor, left as it is), sorted, without "."
// and ".."; empty when it cannot be read.
std::vector<std::string> listDirectory(int dir);

}  // namespace sandgate::sandbox
