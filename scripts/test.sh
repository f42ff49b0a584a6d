#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (unit,
# integration, sandbox). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build=${SANDGATE_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 300
