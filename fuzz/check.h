// SANDGATE_FUZZ_CHECK: a property a fuzz target asserts, in every build type (assert() is gone
// under NDEBUG). A failed check prints why and aborts, which libFuzzer reports as a crash and
// saves the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define SANDGATE_FUZZ_CHECK(cond, what)                                                   \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: property violated: %s (%s)\n", __FILE__, __LINE__, what, \
                   #cond);                                                                \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
