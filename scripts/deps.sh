#!/usr/bin/env bash
# Installs every Debian package sandgate's build and tests need, when missing, then the npm
# packages of the helm tests (scripts/node_deps.sh).
# Idempotent and quiet when nothing is missing. Needs root (or sudo) only to install.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libssl-dev zlib1g-dev libyaml-cpp-dev libre2-dev libspdlog-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libseccomp-dev libcap-dev
  curl git python3 nodejs openssl ca-certificates iproute2 procps
  gdb  # a test whose `sandgate run` hangs reports every process's stacks (run_support.py)
  unzip  # (npm comes with nodejs) scripts/node_deps.sh: Helm and the Kubernetes schemas for the helm tests
  prometheus  # promtool and a real Prometheus for the metrics and alert-rule tests
  clang libclang-rt-14-dev  # fuzz/: clang, libFuzzer and clang's sanitizer runtimes
  libnghttp2-dev  # proxy/h2/: HTTP/2 framing and HPACK
  nghttp2-client nghttp2-server python3-h2 python3-grpcio  # h2 and gRPC clients/upstreams in tests
  libssh-dev  # run/: the per-run SSH host key (and serve's SSH broker)
  libhiredis-dev redis-server  # budgets shared across replicas, and a real Redis in tests
  squid  # a real parent proxy in the upstream_proxies tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$(dirname "$0")/node_deps.sh"
