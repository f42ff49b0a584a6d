#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (unit,
# integration, sandbox), then builds again with AddressSanitizer and UndefinedBehaviorSanitizer
# and runs the whole suite once more on that build. Exits non-zero on any failure.
# In between, the fuzz smoke run (fuzz/run.sh --smoke). SANDGATE_SANITIZE=0 skips the sanitizer
# run and SANDGATE_FUZZ_SMOKE=0 the fuzz smoke (quicker local checks; CI always runs both).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build=${SANDGATE_BUILD_DIR:-build}
# The whole suite registers secrets: the leak check (tests/leak/) must find some to check.
export SANDGATE_LEAK_CHECK_REQUIRE=1

# CTest counts a Python test file as passed when some of its tests were skipped (a client not
# installed, a kernel that refuses namespaces): say which, and why, from CTest's log.
report_skips() {
  local log="$1/Testing/Temporary/LastTest.log" skips
  skips=$(grep -E " \.\.\. skipped " "$log" 2>/dev/null | sed -E 's/^/  /' || true)
  if [ -n "$skips" ]; then
    echo "== skipped inside test files CTest counts as passed ($1):"
    echo "$skips"
  else
    echo "== no test was skipped inside the test files CTest counts as passed ($1)"
  fi
}

ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 300
report_skips "$build"

# Every libFuzzer target (fuzz/) over its committed seed corpus and regression inputs, then
# 30 s of fresh inputs each: about 5 minutes, plus the clang build (build-fuzz/, ccache'd).
if [ "${SANDGATE_FUZZ_SMOKE:-1}" != 0 ]; then
  echo "== fuzz smoke: each fuzz target over its seed corpus, then 30 s of new inputs (build-fuzz/)"
  ./fuzz/run.sh --smoke 30
fi

if [ "${SANDGATE_SANITIZE:-1}" != 0 ]; then
  sanitized=${SANDGATE_SANITIZE_BUILD_DIR:-build-sanitize}
  echo "== the suite again, built with -fsanitize=address,undefined ($sanitized)"
  SANDGATE_BUILD_DIR="$sanitized" SANDGATE_BUILD_TYPE=Debug \
    SANDGATE_CMAKE_ARGS="-DSANDGATE_SANITIZE=ON -DSANDGATE_BENCH=OFF" ./scripts/build.sh
  ctest --test-dir "$sanitized" --output-on-failure -j "$(nproc)" --timeout 300
  report_skips "$sanitized"
fi
