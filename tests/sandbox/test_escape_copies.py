"""The copies out of a sandbox neither amplify nor carry privilege (issue 37 items 5 and 8).
From the workload's side, in a real sandbox: with `--disk 16M` it leaves a 2 GiB sparse file and
30 hard links of a 10 MiB file; the copy of its layer to the run's directory keeps the hole and
the links, so the host's disk holds what the sized layer held and not 2.4 GB. A run leaves
setuid and setgid files and a FIFO in its layer; a later run `--from` it (and its own setuid
file) gets copies that are the later run's, without setuid or setgid, the FIFO and links kept.
Runs as root (the copies a root launcher makes are the ones that could be root's)."""

import json
import os
import stat
import tempfile
import unittest

from run_support import TemporaryUser, WorkspaceRuns, namespaces_refused, run_bounded
from sandgate_fixture import binary


def disk_usage(top):
    """Bytes allocated under `top`, each inode once (du -s)."""
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames + [""]:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


class CopiesTest(WorkspaceRuns):
    PREFIX = "sandgate-copies-"
    NOT_ROOT = "needs root (as CI runs)"
    TIMEOUT = 180

    def run_dir(self):
        return os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")

    @staticmethod
    def read_json(run, name):
        with open(os.path.join(run, name)) as f:
            return json.load(f)

    def test_disk_copy_keeps_holes_and_links_and_drops_setuid(self):
        self.check_disk_copy(self.new_workspace(), self.run_dir())

    def test_rootless_disk_copy_keeps_holes_and_links_and_drops_setuid(self):
        with TemporaryUser() as user:
            ws = self.new_workspace()
            os.chown(ws, user.uid, user.gid)
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            os.chown(runs, user.uid, user.gid)
            self.check_disk_copy(ws, os.path.join(runs, "run"), **user.popen_args())

    def check_disk_copy(self, ws, run, **kwargs):
        script = ("truncate -s 2G sparse && head -c 10485760 /dev/zero | tr '\\000' a > big && "
                  "i=0; while [ $i -lt 30 ]; do i=$((i+1)); ln big link$i || exit 1; done; "
                  "cp /bin/true suid && chmod 4755 suid && echo written")
        r = self.sandgate(["sh", "-c", script], "--disk", "16M", workspace=ws, run_dir=run,
                          **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual((r.returncode, r.stdout), (0, "written\n"), r.stderr)
        upper = os.path.join(run, "overlay", "upper")
        sparse = os.lstat(os.path.join(upper, "sparse"))
        self.assertEqual(sparse.st_size, 2 << 30)
        self.assertLess(sparse.st_blocks * 512, 1 << 20, "the hole was written as zeros")
        big = os.lstat(os.path.join(upper, "big"))
        self.assertEqual(big.st_nlink, 31, "the links were copied as files")
        for i in range(1, 31):
            self.assertEqual(os.lstat(os.path.join(upper, f"link{i}")).st_ino, big.st_ino)
        # The whole run directory: what the 16M layer held, not 2.4 GB.
        self.assertLess(disk_usage(run), 24 << 20)
        self.assertEqual(stat.S_IMODE(os.lstat(os.path.join(upper, "suid")).st_mode) & 0o6000, 0)
        report = self.read_json(run, "report.json")
        self.assertFalse([w for w in report["warnings"] if "disk_limit" in w or
                          "incomplete" in w], report["warnings"])
        changes = {c["path"]: c for c in self.read_json(run, "changes.json")["changes"]}
        self.assertEqual(changes["sparse"]["after"]["size"], 2 << 30)
        self.assertEqual(changes["link30"]["after"]["sha256"], changes["big"]["after"]["sha256"])

    def test_from_copies_are_the_runs_without_setuid(self):
        ws = self.new_workspace()
        with open(os.path.join(ws, "kept.txt"), "w") as f:
            f.write("kept\n")
        r1, r2 = self.run_dir(), self.run_dir()
        r = self.sandgate(["sh", "-c", "cp /bin/true suid && chmod 4755 suid && "
                           "cp /bin/true sgid && chmod 2755 sgid && mkfifo fifo && "
                           "ln -s /etc/shadow lnk && echo data > f && ln f f2"],
                          workspace=ws, run_dir=r1)
        self.assertEqual(r.returncode, 0, r.stderr)
        up1 = os.path.join(r1, "overlay", "upper")
        if stat.S_IMODE(os.lstat(os.path.join(up1, "suid")).st_mode) & 0o4000 == 0:
            self.skipTest("this kernel kept no setuid bit in the run's own layer")
        r = self.sandgate(["sh", "-c", "cat kept.txt && test -p fifo && "
                           "cp /bin/true own && chmod 6755 own"],
                          "--from", r1, workspace=ws, run_dir=r2)
        self.assertEqual((r.returncode, r.stdout), (0, "kept\n"), r.stderr)
        run_uid = os.lstat(os.path.join(r2, "overlay", "own")).st_uid
        self.assertNotEqual(run_uid, 0)
        up2 = os.path.join(r2, "overlay", "upper")
        for name in ("suid", "sgid", "own"):
            st = os.lstat(os.path.join(up2, name))
            self.assertEqual(stat.S_IMODE(st.st_mode) & 0o6000, 0, name)
            self.assertEqual(st.st_uid, run_uid, name)
        for dirpath, dirnames, filenames in os.walk(up2):
            for n in dirnames + filenames + [""]:
                self.assertEqual(os.lstat(os.path.join(dirpath, n)).st_uid, run_uid,
                                 os.path.join(dirpath, n))
        self.assertTrue(stat.S_ISFIFO(os.lstat(os.path.join(up2, "fifo")).st_mode))
        self.assertEqual(os.readlink(os.path.join(up2, "lnk")), "/etc/shadow")
        self.assertEqual(os.lstat(os.path.join(up2, "f")).st_ino,
                         os.lstat(os.path.join(up2, "f2")).st_ino)
        a = run_bounded([binary(), "apply", r2], 60)
        self.assertEqual(a.returncode, 0, a.stdout + a.stderr)
        self.assertEqual(stat.S_IMODE(os.lstat(os.path.join(ws, "own")).st_mode) & 0o6000, 0)


if __name__ == "__main__":
    unittest.main()
