#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (unit,
# integration, sandbox), then builds again with AddressSanitizer and UndefinedBehaviorSanitizer
# and runs the whole suite once more on that build. Exits non-zero on any failure.
# SANDGATE_SANITIZE=0 skips the sanitizer run (a quicker local check; CI always runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build=${SANDGATE_BUILD_DIR:-build}
# The whole suite registers secrets: the leak check (tests/leak/) must find some to check.
export SANDGATE_LEAK_CHECK_REQUIRE=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 300

if [ "${SANDGATE_SANITIZE:-1}" != 0 ]; then
  sanitized=${SANDGATE_SANITIZE_BUILD_DIR:-build-sanitize}
  echo "== the suite again, built with -fsanitize=address,undefined ($sanitized)"
  SANDGATE_BUILD_DIR="$sanitized" SANDGATE_BUILD_TYPE=Debug \
    SANDGATE_CMAKE_ARGS="-DSANDGATE_SANITIZE=ON -DSANDGATE_BENCH=OFF" ./scripts/build.sh
  ctest --test-dir "$sanitized" --output-on-failure -j "$(nproc)" --timeout 300
fi
