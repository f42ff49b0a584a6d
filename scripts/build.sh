#!/usr/bin/env bash
# Installs what is missing, configures and builds sandgate into ${SANDGATE_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
build=${SANDGATE_BUILD_DIR:-build}
# Let ccache share objects between checkouts in different folders (paths made relative).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# SANDGATE_CMAKE_ARGS: more -D options (scripts/test.sh's sanitizer build uses it).
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${SANDGATE_BUILD_TYPE:-RelWithDebInfo}" \
  ${SANDGATE_CMAKE_ARGS:-} >/dev/null
ninja -C "$build" ${SANDGATE_TARGETS:-}
