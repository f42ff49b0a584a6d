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
  libssh-dev  # proxy/ssh/: the SSH broker's server and client legs (issue #42)
  openssh-server  # a real sshd the SSH broker tests start on loopback (never the system's)
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
  # Debian starts the services it installs (openssh-server's sshd on port 22) unless
  # policy-rc.d says no: the tests start their own sshd on loopback, and a system sshd left
  # listening would be a way into this machine nobody asked for. A policy-rc.d already there
  # (containers ship one) is left as it is.
  policy_added=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# scripts/deps.sh: no service starts while it installs packages\nexit 101\n' |
      $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod 755 /usr/sbin/policy-rc.d
    policy_added=1
  fi
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$policy_added" ] || $sudo rm -f /usr/sbin/policy-rc.d
  # An sshd installed here stays off at boot too: Debian's init script and unit honour
  # sshd_not_to_be_run, and systemd (where it runs) gets the unit disabled. An openssh-server
  # that was already installed is the machine owner's and is left alone.
  if [[ " ${missing[*]} " == *" openssh-server "* ]]; then
    $sudo touch /etc/ssh/sshd_not_to_be_run
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
      $sudo systemctl disable ssh.service >/dev/null 2>&1 || true
    fi
  fi
fi
"$(dirname "$0")/node_deps.sh"
