// common/absolute_names.h: after resolveNamesAsGiven() glibc's resolver state has no search
// domain left, even where the environment named one, and the starting environment is kept for
// children. (tests/integration/test_dns.py makes the attempt against a DNS server.)
//
// glibc keeps the resolver configuration it first loaded until resolv.conf changes, so each
// case runs in a child process that resolves nothing before it.
#include "common/absolute_names.h"

#include <gtest/gtest.h>
#include <resolv.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace sandgate::absolute_names {
namespace {

bool contains(char* const* env, std::string_view entry) {
  for (; *env != nullptr; ++env) {
    if (entry == *env) return true;
  }
  return false;
}

// Runs `check` in a child with LOCALDOMAIN and HOSTALIASES set as an operator's environment
// could have them (LOCALDOMAIN also overrides resolv.conf's `search`); its exit status.
template <typename Check>
int inChild(Check check) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("LOCALDOMAIN", "corp.example other.example", 1);
    ::setenv("HOSTALIASES", "/nonexistent/aliases", 1);
    ::_exit(check());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

// 0 when no search entry is left, 1 when one is.
int searchEntriesLeft() {
  if (res_init() != 0) return 2;
  for (int i = 0; i < MAXDNSRCH && _res.dnsrch[i] != nullptr; ++i) {
    if (*_res.dnsrch[i] != '\0') return 1;
  }
  return 0;
}

TEST(AbsoluteNames, WithoutItTheEnvironmentsSearchDomainsApply) {
  // The control: the check below can fail.
  EXPECT_EQ(inChild([] { return searchEntriesLeft(); }), 1);
}

TEST(AbsoluteNames, NoSearchDomainIsLeft) {
  EXPECT_EQ(inChild([] {
              resolveNamesAsGiven();
              return searchEntriesLeft();
            }),
            0);
}

TEST(AbsoluteNames, HostAliasesIsDroppedAndChildrenGetTheStartingEnvironment) {
  EXPECT_EQ(inChild([] {
              resolveNamesAsGiven();
              if (std::getenv("HOSTALIASES") != nullptr) return 1;
              char* const* start = startEnvironment();
              if (!contains(start, "LOCALDOMAIN=corp.example other.example")) return 2;
              if (!contains(start, "HOSTALIASES=/nonexistent/aliases")) return 3;
              resolveNamesAsGiven();  // a second call keeps the first environment
              if (startEnvironment() != start) return 4;
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace sandgate::absolute_names
