#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (unit,
# integration, sandbox). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build=${SANDGATE_BUILD_DIR:-build}
# The whole suite registers secrets: the leak check (tests/leak/) must find some to check.
export SANDGATE_LEAK_CHECK_REQUIRE=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 300
