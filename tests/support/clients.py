"""Real clients (curl, Python urllib) pointed at a running sandgate, loopback only."""

import os
import subprocess
import tempfile

import artifacts

# Variables that could send a client anywhere but where the test says.
_PROXY_VARS = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
               "NO_PROXY", "no_proxy"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    env.update(extra)
    return env


class CurlResult:
    def __init__(self, rc, status, connect_status, headers, body, stderr):
        self.rc = rc
        self.status = status                  # final response status (0: none)
        self.connect_status = connect_status  # status of the proxy's CONNECT answer (0: none)
        self.headers = headers                # every header line received, lower-cased names
        self.body = body
        self.stderr = stderr

    def header(self, name):
        for k, v in self.headers:
            if k == name.lower():
                return v
        return None


def curl(url, *args, proxy=None, env=None, timeout=20):
    """Runs curl; `proxy` is passed with -x (else the environment decides)."""
    with tempfile.TemporaryDirectory() as d:
        hfile, bfile = os.path.join(d, "h"), os.path.join(d, "b")
        cmd = ["curl", "-sS", "--max-time", str(timeout - 5), "-D", hfile, "-o", bfile,
               "-w", "%{http_code} %{http_connect}"]
        if proxy:
            cmd += ["-x", proxy]
        cmd += list(args) + [url]
        p = subprocess.run(cmd, env=env if env is not None else clean_env(),
                           capture_output=True, timeout=timeout)
        codes = p.stdout.decode().split()
        headers = []
        head_text = ""
        if os.path.exists(hfile):
            with open(hfile, "rb") as f:
                head_text = f.read().decode("latin-1")
            for line in head_text.split("\r\n"):
                if ":" in line and not line.startswith("HTTP/"):
                    k, _, v = line.partition(":")
                    headers.append((k.strip().lower(), v.strip()))
        body = b""
        if os.path.exists(bfile):
            with open(bfile, "rb") as f:
                body = f.read()
        # Every head curl saw (the proxy's CONNECT answer included), the body, curl's messages.
        artifacts.record("response", "curl", head_text.encode("latin-1") + b"\r\n" + body +
                         b"\r\n" + p.stderr)
        return CurlResult(p.returncode, int(codes[0]) if codes else 0,
                          int(codes[1]) if len(codes) > 1 else 0, headers, body,
                          p.stderr.decode(errors="replace"))
