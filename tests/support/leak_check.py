"""Greps recorded artifacts for recorded secrets: the check behind security invariant 3.

A secret counts as leaked when an artifact holds it verbatim, URL-encoded, or base64-encoded
(standard or URL-safe alphabet, at any of the three byte alignments it can have inside a longer
encoded string such as `Basic base64(user:secret)`). Findings name the artifact file and the
secret's name, never its value, so that a failing run does not print what it protects.
"""

import base64
import json
import os
import urllib.parse

from artifacts import SECRETS


def _b64_cores(value):
    """Base64 substrings that any encoding of a string containing `value` must contain.

    Encoding works on 3-byte groups, so `value` starts at one of three offsets within a group.
    For each offset we encode it behind that many filler bytes and keep only the characters
    that depend on `value` alone (dropping the first group when it holds filler and the last
    one when it is partial, since those depend on the neighbours)."""
    raw = value.encode()
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        start = 4 if k else 0
        end = len(enc) - (4 if (k + len(raw)) % 3 else 0)
        core = enc[start:end]
        if len(core) >= 8:
            out.append(core)
    return out


def forms(value):
    """{form name: text} for every form of `value` the check looks for."""
    f = {"raw": value,
         "url-encoded": urllib.parse.quote(value, safe=""),
         "url-encoded+": urllib.parse.quote_plus(value)}
    for i, core in enumerate(_b64_cores(value)):
        f["base64@%d" % i] = core
        f["base64url@%d" % i] = core.replace("+", "-").replace("/", "_")
    # Drop duplicates (a value with no reserved characters is its own URL encoding).
    seen, unique = set(), {}
    for name, text in f.items():
        if text not in seen:
            seen.add(text)
            unique[name] = text
    return unique


def load_secrets(root):
    """[(name, value, registered_by)] from root/secrets/*.json."""
    d = os.path.join(root, SECRETS)
    out = []
    if not os.path.isdir(d):
        return out
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(d, fn)) as f:
            rec = json.load(f)
        out.append((rec["name"], rec["value"], rec.get("by", "?")))
    return out


def artifact_files(root):
    """Every recorded artifact (everything but the secrets and unfinished temp files)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == SECRETS or rel.startswith(SECRETS + os.sep):
            dirnames[:] = []
            continue
        out += [os.path.join(dirpath, f) for f in sorted(filenames) if not f.endswith(".tmp")]
    return sorted(out)


def find_leaks(root):
    """(secrets, artifacts, leaks): leaks are (artifact path relative to root, secret name,
    form) triples. Matching is on bytes, case-sensitive for the raw and base64 forms and
    case-insensitive for the URL-encoded ones (percent escapes may be either case)."""
    secrets = load_secrets(root)
    files = artifact_files(root)
    patterns = []
    for name, value, _ in secrets:
        for form, text in forms(value).items():
            needle = text.encode()
            if form.startswith("url-encoded"):
                patterns.append((name, form, needle.lower(), True))
            else:
                patterns.append((name, form, needle, False))
    leaks = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        lower = data.lower()
        for name, form, needle, fold in patterns:
            if needle in (lower if fold else data):
                leaks.append((os.path.relpath(path, root), name, form))
    return secrets, files, leaks
