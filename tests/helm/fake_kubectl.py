#!/usr/bin/env python3
"""A stand-in for kubectl with just the verbs the chart's CA Job runs, over a directory that
plays the API server (FAKE_CLUSTER/<namespace>/<kind>/<name>.json): `get secret NAME`
(exit 1 when absent; `-o jsonpath={.data.KEY}` prints one value), `create secret generic NAME
--from-file=K=PATH...` (refuses to replace), `create configmap NAME --from-file=K=PATH
--dry-run=client -o yaml` (prints the object), `apply -f -` (creates or replaces). Every call
is appended to FAKE_CLUSTER/calls.log.
"""

import base64
import json
import os
import re
import sys

import yaml

root = os.environ["FAKE_CLUSTER"]
args = sys.argv[1:]
with open(os.path.join(root, "calls.log"), "a") as f:
    f.write(" ".join(args) + "\n")
ns = "default"
if args[:1] == ["-n"]:
    ns, args = args[1], args[2:]


def path(kind, name):
    return os.path.join(root, ns, kind, name + ".json")


def store(obj):
    p = path(obj["kind"].lower(), obj["metadata"]["name"])
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        json.dump(obj, f)


def files(rest):
    out = {}
    for a in rest:
        if a.startswith("--from-file="):
            key, p = a[len("--from-file="):].split("=", 1)
            with open(p, "rb") as f:
                out[key] = f.read()
    return out


if args[:2] == ["get", "secret"]:
    p = path("secret", args[2])
    if not os.path.exists(p):
        sys.stderr.write('Error from server (NotFound): secrets "%s" not found\n' % args[2])
        sys.exit(1)
    with open(p) as f:
        obj = json.load(f)
    if "-o" in args:
        m = re.fullmatch(r"jsonpath=\{\.data\.(.*)\}", args[args.index("-o") + 1])
        sys.stdout.write(obj["data"][m.group(1).replace("\\.", ".")])
elif args[:3] == ["create", "secret", "generic"]:
    if os.path.exists(path("secret", args[3])):
        sys.stderr.write("Error from server (AlreadyExists)\n")
        sys.exit(1)
    store({"kind": "Secret", "metadata": {"name": args[3], "namespace": ns},
           "data": {k: base64.b64encode(v).decode() for k, v in files(args[4:]).items()}})
elif args[:2] == ["create", "configmap"]:
    assert "--dry-run=client" in args and args[args.index("-o") + 1] == "yaml", args
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": args[2]},
           "data": {k: v.decode() for k, v in files(args[3:]).items()}}
    sys.stdout.write(yaml.safe_dump(obj))
elif args[:2] == ["apply", "-f"] and args[2] == "-":
    obj = yaml.safe_load(sys.stdin)
    obj["metadata"]["namespace"] = ns
    store(obj)
else:
    sys.stderr.write("fake kubectl: unsupported %r\n" % (args,))
    sys.exit(2)
