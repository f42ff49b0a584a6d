"""`sandgate serve`'s default worker count is the CPUs it may use, not the host's core count:
run under a one-CPU affinity mask (taskset) and in a cgroup with half a CPU of quota, it starts
one worker and says why. The cgroup is made for the test and removed after it.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

from sandgate_fixture import Sandgate

V1_CPU = "/sys/fs/cgroup/cpu"
V2 = "/sys/fs/cgroup"


def workers_line(sg):
    m = re.search(r"(\d+) worker threads: (.*)", sg.stderr())
    if not m:
        raise AssertionError("no worker count in the log:\n" + sg.stderr())
    return int(m.group(1)), m.group(2)


class WorkerCountTest(unittest.TestCase):
    def serve(self, wrapper=()):
        sg = Sandgate({"p": {"allow": []}}, [{"name": "t", "policy": "p", "token": "w0rk"}],
                      threads=0)  # --threads 0: the default
        self.addCleanup(sg.cleanup)
        sg.start(wrapper=wrapper)
        return sg

    def test_default_follows_the_affinity_mask(self):
        if os.cpu_count() < 2:
            self.skipTest("one CPU: an affinity mask cannot make it smaller")
        n, why = workers_line(self.serve(["taskset", "-c", "0"]))
        self.assertEqual((n, why), (1, "1 CPUs in the affinity mask"))
        n, why = workers_line(self.serve())
        self.assertEqual(n, len(os.sched_getaffinity(0)), why)

    def test_default_follows_the_cgroup_cpu_quota(self):
        if os.geteuid() != 0:
            self.skipTest("making a cgroup needs root")
        if os.path.exists(os.path.join(V2, "cgroup.controllers")):
            self.skipTest("cgroup v2 only: serve's own cgroup would need delegation (the unit "
                          "tests cover cpu.max)")
        if not os.path.isdir(V1_CPU):
            self.skipTest("no cgroup v1 cpu hierarchy at %s" % V1_CPU)
        group = tempfile.mkdtemp(prefix="sandgate-test-", dir=V1_CPU)  # mkdir makes a cgroup
        self.addCleanup(os.rmdir, group)  # after sandgate stopped (cleanups run in reverse)
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write("50000")
        # The wrapper joins the cgroup, then execs sandgate (so the PID stays sandgate's).
        wrapper = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', group]
        n, why = workers_line(self.serve(wrapper))
        self.assertEqual(n, 1, why)
        self.assertIn("cgroup CPU quota 0.50 CPUs", why)
        self.assertIn(os.path.basename(group), why)


if __name__ == "__main__":
    unittest.main()
