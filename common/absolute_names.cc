// LOCALDOMAIN and HOSTALIASES for the process, with the starting environment kept for children
// (see absolute_names.h).
#include "common/absolute_names.h"

#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace sandgate::absolute_names {

namespace {

struct Saved {
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

Saved* saved = nullptr;

}  // namespace

void resolveNamesAsGiven() {
  if (saved != nullptr) return;
  saved = new Saved;  // lives as long as the process
  for (char** e = environ; *e != nullptr; ++e) saved->strings.emplace_back(*e);
  for (auto& s : saved->strings) saved->pointers.push_back(s.data());
  saved->pointers.push_back(nullptr);
  // A blank, not the empty string: glibc then keeps no search entry at all, where "" leaves one
  // empty entry that asks for the same name a second time.
  ::setenv("LOCALDOMAIN", " ", 1);
  ::unsetenv("HOSTALIASES");
}

char* const* startEnvironment() { return saved != nullptr ? saved->pointers.data() : environ; }

}  // namespace sandgate::absolute_names
