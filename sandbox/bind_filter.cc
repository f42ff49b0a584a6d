// Builds and loads bind mode's seccomp filter (see bind_filter.h) with libseccomp.
#include "sandbox/bind_filter.h"

#include <seccomp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// System calls newer than the libseccomp this may be built with, by number. The numbers are the
// same on every architecture since the 5.x tables were unified (x86_64 and aarch64 alike).
constexpr int kFchmodat2 = 452;   // Linux 6.6
constexpr int kSetxattrat = 463;  // Linux 6.13

int resolve(const char* name, int fallback) {
  int nr = seccomp_syscall_resolve_name(name);
  return nr == __NR_SCMP_ERROR ? fallback : nr;
}

}  // namespace

void loadBindWorkspaceFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) throw SetupError("sandbox: bind filter: seccomp_init failed");
  struct Release {
    scmp_filter_ctx c;
    ~Release() { seccomp_release(c); }
  } release{ctx};
  auto add = [&](uint32_t action, int nr, const char* name,
                 std::initializer_list<scmp_arg_cmp> args) {
    if (nr < 0) return;  // not on this architecture (open, creat, mkdir, mknod on aarch64)
    int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(args.size()),
                                    args.size() ? args.begin() : nullptr);
    if (rc != 0) throwSys(std::string("bind filter rule for ") + name, "seccomp_rule_add", -rc);
  };
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0) {
    throwSys("bind filter bad-arch action", "seccomp_attr_set", -rc);
  }
  // The mode's argument index per call. mode_t is 32 bits: the mask ignores the upper half of
  // the register, and each bit gets its own rule (rules of one call are OR-ed).
  struct ModeCall {
    const char* name;
    int fallback;
    unsigned arg;
  };
  const ModeCall calls[] = {
      {"chmod", -1, 1},   {"fchmod", -1, 1}, {"fchmodat", -1, 2}, {"fchmodat2", kFchmodat2, 2},
      {"open", -1, 2},    {"openat", -1, 3}, {"creat", -1, 1},    {"mkdir", -1, 1},
      {"mkdirat", -1, 2}, {"mknod", -1, 1},  {"mknodat", -1, 2}};
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const auto& c : calls) {
    int nr = resolve(c.name, c.fallback);
    for (uint64_t bit : {uint64_t{S_ISUID}, uint64_t{S_ISGID}}) {
      add(eperm, nr, c.name, {scmp_arg_cmp{c.arg, SCMP_CMP_MASKED_EQ, bit, bit}});
    }
  }
  add(SCMP_ACT_ERRNO(ENOSYS), resolve("openat2", -1), "openat2", {});
  for (const auto& [name, fallback] :
       {std::pair{"setxattr", -1}, std::pair{"lsetxattr", -1}, std::pair{"fsetxattr", -1},
        std::pair{"setxattrat", kSetxattrat}}) {
    add(SCMP_ACT_ERRNO(ENOTSUP), resolve(name, fallback), name, {});
  }
  if (int rc = seccomp_load(ctx); rc != 0) throwSys("load the bind filter", "seccomp", -rc);
}

}  // namespace sandgate::sandbox
