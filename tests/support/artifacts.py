"""Records what the suite saw from sandgate, and the secrets it used, for the leak check.

CTest points SANDGATE_TEST_ARTIFACTS at one directory per build (cleared by the
`leak.clear_artifacts` fixture before the suite runs). Every test process writes into it:

  secrets/<sha256>.json    {"name": ..., "value": ..., "by": test module} (one file per secret)
  <kind>/<module>-<pid>-<n>-<label>   one artifact: a log, an audit file, a metrics page, a
                                      response (head and body) a client got through sandgate

tests/leak/test_no_secret_leaks.py runs last and greps every artifact for every secret. Without
the variable (a test run by hand) nothing is recorded. One file per record, written to a temp
name and renamed, so parallel test processes never interleave or leave half a file.
"""

import hashlib
import itertools
import json
import os
import shutil
import sys

ENV = "SANDGATE_TEST_ARTIFACTS"
SECRETS = "secrets"
# A secret shorter than this could match by chance (and an encoding of it even more so): the
# tests must use distinctive values.
MIN_SECRET_LEN = 12
# A response body is recorded up to this many bytes (a /bytes?n=... body is all "x").
MAX_RECORD = 4 << 20

_counter = itertools.count()


def root():
    """The artifacts directory, or None when the suite is not run by CTest."""
    d = os.environ.get(ENV)
    return d or None


_module_name = None


def _module():
    """The test module doing the recording (for artifact names), e.g. test_intercept."""
    global _module_name
    if _module_name is None:
        for m in list(sys.modules.values()):
            base = os.path.basename(getattr(m, "__file__", None) or "")
            if base.startswith("test_") and base.endswith(".py"):
                _module_name = base[:-3]
                break
        else:
            return "tests"
    return _module_name


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


def _name(kind, label):
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:60]
    return os.path.join(root(), kind, "%s-%d-%d-%s" % (_module(), os.getpid(), next(_counter),
                                                       safe))


def register_secret(name, value):
    """Records a secret value the suite hands to sandgate (file contents, env, exec output)."""
    if isinstance(value, bytes):
        value = value.decode()
    value = value.strip()
    if len(value) < MIN_SECRET_LEN:
        raise ValueError("test secret %r is shorter than %d characters: use a distinctive value"
                         % (name, MIN_SECRET_LEN))
    if not root():
        return
    digest = hashlib.sha256((name + "\0" + value).encode()).hexdigest()[:32]
    path = os.path.join(root(), SECRETS, digest + ".json")
    if not os.path.exists(path):
        _write(path, json.dumps({"name": name, "value": value, "by": _module()}).encode())


def record(kind, label, data):
    """Records one artifact: `data` (bytes or str) under `kind` (log, audit, metrics, response)."""
    if not root():
        return
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    _write(_name(kind, label), bytes(data[:MAX_RECORD]))


def record_file(kind, label, path):
    """Copies a file sandgate wrote (its stderr log, an audit file) into the artifacts."""
    if not root() or not path or not os.path.exists(path):
        return
    dest = _name(kind, label)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(path, dest + ".tmp")
    os.rename(dest + ".tmp", dest)


def record_response(label, status, headers, body):
    """Records a response a test client received from (or through) sandgate: status line,
    headers (a dict, or a list of pairs) and body."""
    if not root():
        return
    items = headers.items() if isinstance(headers, dict) else headers
    head = "HTTP %s\r\n" % status + "".join("%s: %s\r\n" % (k, v) for k, v in items)
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogateescape")
    record("response", label, head.encode("latin-1", "replace") + b"\r\n" + (body or b""))
