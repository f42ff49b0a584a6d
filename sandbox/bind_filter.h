// Bind mode's seccomp filter: the workload writes the host's directory itself, so no file it
// leaves there may carry privilege — no setuid or setgid bit, no file capability (issue 37).
#pragma once

namespace sandgate::sandbox {

// Loads, on top of the confinement filter (seccomp_filter.h), a filter that refuses for bind
// runs:
//  - S_ISUID or S_ISGID in the mode of chmod, fchmod, fchmodat, fchmodat2, open, openat, creat,
//    mkdir, mkdirat, mknod and mknodat → EPERM (open's mode matters only with O_CREAT or
//    O_TMPFILE; libcs pass 0 otherwise, so refusing the bits in any case costs nothing);
//  - openat2 → ENOSYS: its mode sits in a struct in memory, which a filter cannot read; libc and
//    language runtimes fall back to openat, as on kernels before 5.6;
//  - setxattr, lsetxattr, fsetxattr and setxattrat → ENOTSUP, whatever the name: a filter
//    cannot compare strings, so security.capability cannot be told from user.*; ENOTSUP is what
//    a filesystem without xattrs answers, which cp, tar and rsync take as "keep none".
//    (A process without CAP_SETFCAP, as the workload is, cannot set security.capability
//    anyway; this is the second line.)
// What no system call can do, the launcher's end-of-run sweep (workspace_sweep.h) clears.
// Needs no_new_privs. Throws SetupError.
void loadBindWorkspaceFilter();

}  // namespace sandgate::sandbox
