#!/usr/bin/env bash
# The whole test suite: installs what is missing, configures, builds, runs every CTest test
# (unit, integration, sandbox). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
build=${SANDGATE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 300
