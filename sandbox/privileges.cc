// Capability, securebit, no_new_privs and rlimit handling with libcap.
#include "sandbox/privileges.h"

#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <vector>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {

void applyResourceLimits(uint64_t maxOpenFiles) {
  rlimit core{0, 0};
  checkSys(setrlimit(RLIMIT_CORE, &core), "set RLIMIT_CORE 0", "setrlimit");
  rlimit nofile{};
  checkSys(getrlimit(RLIMIT_NOFILE, &nofile), "read RLIMIT_NOFILE", "getrlimit");
  rlim_t want = std::min<rlim_t>(maxOpenFiles, nofile.rlim_max);
  nofile = {want, want};
  checkSys(setrlimit(RLIMIT_NOFILE, &nofile), "set RLIMIT_NOFILE " + std::to_string(want),
           "setrlimit");
}

void dropPrivileges() {
  checkSys(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs", "prctl");
  // Even if something regained uid 0 inside the namespace, it would get no capabilities.
  unsigned bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                  SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  checkSys(prctl(PR_SET_SECUREBITS, bits, 0, 0, 0), "lock securebits", "prctl");
  // 64 covers every capability the kernel may know (the running kernel can be newer than the
  // headers); PR_CAPBSET_DROP says EINVAL for numbers past its last one.
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      throwSys("drop capability " + std::to_string(cap) + " from the bounding set",
               "prctl(PR_CAPBSET_DROP)");
    }
  }
  if (cap_reset_ambient() != 0) throwSys("clear ambient capabilities", "prctl");
  cap_t empty = cap_init();
  if (empty == nullptr) throwSys("drop capabilities", "cap_init");
  int rc = cap_set_proc(empty);
  int err = errno;
  cap_free(empty);
  if (rc != 0) throwSys("drop capabilities", "capset", err);
}

void closeOtherDescriptors(std::vector<int> keep) {
  auto closeRange = [](unsigned first, unsigned last) {
    if (first > last) return;
    if (close_range(first, last, 0) == 0) return;
    if (errno != ENOSYS) throwSys("close inherited descriptors", "close_range");
    // Old kernels: walk /proc/self/fd (collect first: closing while iterating moves the dir fd).
    std::vector<int> open;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = std::stoi(e.path().filename().string());
      if (static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last) {
        open.push_back(fd);
      }
    }
    for (int fd : open) close(fd);
  };
  std::sort(keep.begin(), keep.end());
  unsigned first = 3;
  for (int k : keep) {
    if (k < static_cast<int>(first)) continue;
    closeRange(first, static_cast<unsigned>(k) - 1);
    first = static_cast<unsigned>(k) + 1;
  }
  closeRange(first, ~0u);
}

}  // namespace sandgate::sandbox
