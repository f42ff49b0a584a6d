"""ConfigMap and Secret volumes laid out the way the kubelet's atomic writer does, and
`sandgate serve` run from the chart's rendered Deployment against them.

A volume directory holds `..<timestamp>/` with the files, `..data` -> that directory, and one
symlink per key, `<key>` -> `..data/<key>`. An update writes a new timestamped directory, points
a temporary link at it, renames that link over `..data` (the one atomic step), then removes the
old directory: a reader sees the old set or the new set, never a mix.
"""

import os
import shutil
import subprocess
import time

import yaml

import chart_support as cs
from sandgate_fixture import binary, wait_until


class KubeletVolume:
    def __init__(self, path, mode=0o644):
        self.path = path
        self.mode = mode
        self.n = 0
        os.makedirs(path, exist_ok=True)

    def write(self, files):
        """Publishes `files` (name -> bytes/str) as the volume's new content, atomically."""
        self.n += 1
        stamp = "..%s_%09d.%d" % (time.strftime("%Y_%m_%d_%H_%M_%S"), time.monotonic_ns() % 10**9,
                                 self.n)
        new = os.path.join(self.path, stamp)
        os.mkdir(new, 0o755)
        for name, data in files.items():
            p = os.path.join(new, name)
            with open(p, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
            os.chmod(p, self.mode)
        data_link = os.path.join(self.path, "..data")
        old = os.readlink(data_link) if os.path.islink(data_link) else None
        tmp = os.path.join(self.path, "..data_tmp")
        os.symlink(stamp, tmp)
        os.rename(tmp, data_link)
        for name in files:
            link = os.path.join(self.path, name)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", name), link)
        if old:
            shutil.rmtree(os.path.join(self.path, old))


def deployment_and_config(docs):
    (dep,) = cs.find(docs, "Deployment")
    (cm,) = [c for c in cs.find(docs, "ConfigMap") if "config.yaml" in c.get("data", {})]
    return dep, cm["data"]["config.yaml"]


class PodLayout:
    """The pod's filesystem under a temp dir: every path the chart mounts (/etc/sandgate/...,
    /var/run/secrets/sandgate/...) lives under `root` instead, as a kubelet volume."""

    def __init__(self, root):
        self.root = root

    def host_path(self, pod_path):
        return os.path.join(self.root, pod_path.lstrip("/"))

    def localise(self, config_text, listen_loopback=True):
        """The rendered config with the pod's mount paths moved under `root`. The listeners go
        to 127.0.0.1 on ephemeral ports (a test never binds a fixed port or 0.0.0.0): the only
        change to what the chart rendered besides the paths."""
        cfg = yaml.safe_load(config_text)
        for cred in (cfg.get("credentials") or {}).values():
            cred["source"]["file"] = self.host_path(cred["source"]["file"])
        if cfg.get("ca"):
            cfg["ca"] = {k: self.host_path(v) for k, v in cfg["ca"].items()}
        if listen_loopback:
            cfg["listen"] = {"proxy": "127.0.0.1:0", "metrics": "127.0.0.1:0"}
        return yaml.safe_dump(cfg, sort_keys=False)


def serve_command(dep, layout, ready_file):
    """The container's command line from the Deployment, with its paths under the layout, and
    a ready file so the test learns the ephemeral ports."""
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    args = list(c["args"])
    i = args.index("--config")
    args[i + 1] = layout.host_path(args[i + 1])
    return [binary()] + args + ["--ready-file", ready_file]


def start(cmd, ready_file, stderr_path, timeout=15):
    """Starts `cmd` and waits (bounded) for its ready file; returns (process, ready info)."""
    import json
    err = open(stderr_path, "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    err.close()

    def ready():
        if proc.poll() is not None:
            with open(stderr_path) as f:
                raise AssertionError("sandgate exited with %s:\n%s" % (proc.returncode, f.read()))
        if os.path.exists(ready_file):
            with open(ready_file) as f:
                return json.load(f)
        return None

    info = wait_until(ready, timeout, what="sandgate ready file")
    return proc, info


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def stop(proc, timeout=20):
    """SIGTERM to our own process (by PID), bounded wait; its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            raise AssertionError("sandgate did not stop within %ss" % timeout)
    return proc.returncode
