#!/usr/bin/env python3
"""git clone over SSH through sandgate's SSH broker against straight to sshd (issue #42). Not a
test: it prints figures and the ratio measured in this run and never fails on timing.

It needs root (it creates a git user, uid/gid 61049, with git-shell, and removes it after) and
openssh-server. Everything is on 127.0.0.1, port 0: the sshd, bare repository and deploy key are
tests/integration/test_ssh_broker.py's set-up; the repository gets one more commit of
incompressible files (--mb, default 50 MiB packed); `sandgate serve` has the broker rule
(credential with ssh:, git: repositories org/repo). Then, in turn (best of --runs):

  direct   git clone USER@127.0.0.1:org/repo.git (ssh -p PORT) with the deploy key
  broker   git clone git@git.test:org/repo.git, ssh's ProxyCommand `sandgate connect %h %p`
           through serve, which brokers it to the same sshd with the same key

Reported: seconds, MiB/s of the pack, the ratio broker/direct (target >= 0.8), and sandgate's
CPU seconds for the broker clone (from /proc).

    bench/ssh_bench.py [--mb 50] [--runs 3] [--binary build/cli/sandgate]
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "cli", "sandgate"))
    args = ap.parse_args()
    os.environ["SANDGATE_BINARY"] = os.path.abspath(args.binary)
    os.environ.setdefault("SANDGATE_TEST_ARTIFACTS", tempfile.mkdtemp(prefix="sg-bench-art-"))
    import test_ssh_broker as core
    from sandgate_fixture import Sandgate

    class Env:
        user = "sgbench"
        uid = 61049
        _create_user = core.SshBroker.__dict__["_create_user"]
        _start_sshd = core.SshBroker.__dict__["_start_sshd"]

    env = Env
    sg = None
    try:
        core.SshBroker._set_up_sshd.__func__(env)
        d = env.dir
        # One commit of incompressible files on main: the pack is about --mb MiB.
        seed = os.path.join(d, "big")
        # The bare repositories are the git user's already: root's git refuses them (its
        # safe.directory check) until they are root's again, for the seeding.
        safe = []
        subprocess.run(["chown", "-R", "0:0", env.home], check=True)
        subprocess.run(["git"] + safe + ["clone", "-q", os.path.join(env.home, "org/repo.git"),
                                         seed], check=True)
        for i in range(args.mb):
            with open(os.path.join(seed, f"blob{i:03d}.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
        git_id = ["-c", "user.name=b", "-c", "user.email=b@example.com"]
        subprocess.run(["git", "-C", seed] + git_id + ["add", "."], check=True)
        subprocess.run(["git", "-C", seed] + git_id + ["commit", "-qm", "big"], check=True)
        subprocess.run(["git"] + safe + ["-C", seed, "push", "-q", "origin", "main"], check=True)
        bare = os.path.join(env.home, "org/repo.git")
        subprocess.run(["git"] + safe + ["--git-dir", bare, "repack", "-adq"], check=True)
        subprocess.run(["chown", "-R", f"{env.uid}:{env.uid}", env.home], check=True)
        pack_mib = sum(os.path.getsize(os.path.join(bare, "objects", "pack", f))
                       for f in os.listdir(os.path.join(bare, "objects", "pack"))) / (1 << 20)

        with open(os.path.join(d, "pins"), "w") as f:
            f.write(f"[127.0.0.1]:{env.sshd_port} {env.sshd_pub}\n")
        with open(os.path.join(d, "serve_pins"), "w") as f:
            f.write(f"git.test {env.sshd_pub}\n")
        with open(os.path.join(d, "known-serve"), "w") as f:
            f.write(f"git.test {env.broker_pub}\n")
        sg = Sandgate(
            {"agent": {"allow": [{"host": "git.test", "ports": [22], "cidrs": ["127.0.0.0/8"],
                                  "credential": "deploy",
                                  "git": {"repositories": ["org/repo"]}}]}},
            [{"name": "bench", "policy": "agent", "token": "tok-bench"}],
            resolve={"git.test": f"127.0.0.1:{env.sshd_port}"},
            limits={"idle_timeout": "10m"},
            extra={"ssh": {"host_key": os.path.join(d, "broker_host_key")},
                   "credentials": {"deploy": {
                       "source": {"file": os.path.join(d, "deploy_key")},
                       "hosts": ["git.test"],
                       "ssh": {"user": env.user, "known_hosts": os.path.join(d, "serve_pins")}}}})
        sg.start()

        common = ["ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=yes",
                  "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
        direct_ssh = common + ["-o", f"UserKnownHostsFile={d}/pins",
                               "-p", str(env.sshd_port), "-i", os.path.join(d, "deploy_key")]
        broker_ssh = common + ["-o", f"UserKnownHostsFile={d}/known-serve",
                               "-o", f"ProxyCommand={shlex.quote(args.binary)} connect %h %p"]
        paths = {
            # scp-like: a path relative to the git user's home, as the broker sends it.
            "direct": (direct_ssh, f"{env.user}@127.0.0.1:org/repo.git", {}),
            "broker": (broker_ssh, "git@git.test:org/repo.git",
                       {"HTTPS_PROXY": f"http://bench:tok-bench@127.0.0.1:{sg.proxy_port}"}),
        }
        best = {}
        cpu = {}
        for run in range(args.runs):
            for name, (ssh, url, extra) in paths.items():
                dest = os.path.join(d, f"clone-{name}-{run}")
                e = dict(os.environ, GIT_SSH_COMMAND=shlex.join(ssh), **extra)
                before = cpu_seconds(sg.proc.pid)
                start = time.monotonic()
                r = subprocess.run(["git", "clone", "-q", url, dest], env=e,
                                   capture_output=True, text=True, timeout=600)
                took = time.monotonic() - start
                if r.returncode != 0:
                    audit = [a for a in sg.audit() if a.get("host") == "git.test"]
                    sys.exit(f"{name} clone failed: {r.stderr}\naudit: {audit[-1:]}\n"
                             f"serve: {sg.stderr()[-2000:]}")
                if name == "broker":
                    used = cpu_seconds(sg.proc.pid) - before
                    cpu[name] = min(cpu.get(name, used), used)
                best[name] = min(best.get(name, took), took)
                shutil.rmtree(dest)
        print(f"git clone over SSH of a {pack_mib:.1f} MiB pack, best of {args.runs}")
        print(f"{'path':8} {'seconds':>8} {'MiB/s':>8} {'ratio':>6}")
        for name in paths:
            print(f"{name:8} {best[name]:8.2f} {pack_mib / best[name]:8.1f} "
                  f"{best['direct'] / best[name]:6.2f}")
        print(f"sandgate CPU seconds for the broker clone: {cpu['broker']:.2f}")
    finally:
        if sg is not None:
            sg.cleanup()
        core.SshBroker.tearDownClass.__func__(env)


if __name__ == "__main__":
    main()
