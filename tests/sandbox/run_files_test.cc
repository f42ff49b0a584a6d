// Unit tests of sandbox/run_files: the sandbox's passwd entry for the run's uid.
#include "sandbox/run_files.h"

#include <gtest/gtest.h>

namespace sandgate::sandbox {
namespace {

TEST(RunFiles, EntryReplacesTheSameIdAndTheSameName) {
  const std::string host =
      "root:x:0:0:root:/root:/bin/bash\n"
      "alice:x:1000:1000::/home/alice:/bin/sh\n"
      "sandbox:x:4242:4242::/home/other:/bin/sh\n";
  // Rootless: the launcher's own uid keeps its name, with the sandbox's home (ssh reads
  // ~/.ssh from it).
  EXPECT_EQ(withEntry(host, "alice", 1000, "alice:x:1000:1000:sandgate run:/tmp/home:/bin/sh", 2),
            "root:x:0:0:root:/root:/bin/bash\n"
            "sandbox:x:4242:4242::/home/other:/bin/sh\n"
            "alice:x:1000:1000:sandgate run:/tmp/home:/bin/sh\n");
  // A leased uid: a host user that happens to be called `sandbox` is not the run's.
  EXPECT_EQ(withEntry(host, "sandbox", 2113953830,
                      "sandbox:x:2113953830:2113953830:sandgate run:/tmp/home:/bin/sh", 2),
            "root:x:0:0:root:/root:/bin/bash\n"
            "alice:x:1000:1000::/home/alice:/bin/sh\n"
            "sandbox:x:2113953830:2113953830:sandgate run:/tmp/home:/bin/sh\n");
  // An id that is only a prefix or a suffix of another is not the same id.
  EXPECT_EQ(withEntry("u:x:10000:1::/:/bin/sh\n", "v", 1000, "v:x:1000:1::/tmp/home:/bin/sh", 2),
            "u:x:10000:1::/:/bin/sh\nv:x:1000:1::/tmp/home:/bin/sh\n");
}

}  // namespace
}  // namespace sandgate::sandbox
