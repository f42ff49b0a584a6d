#!/usr/bin/env bash
# Start-up cost of the launcher: `sandgate run -- true` against plain `true` and against
# `unshare -Urn true` (a bare user+network namespace), in both workspace modes (overlay, the
# default, and bind), with hyperfine when installed, else a
# bash loop timed with date +%s%N. Prints mean milliseconds per run and the ratios.
# Usage: bench/launcher_bench.sh [path/to/sandgate] [runs]   (env SANDGATE_RUN_ARGS adds flags)
set -euo pipefail

SANDGATE="${1:-${SANDGATE:-$(dirname "$0")/../build/cli/sandgate}}"
RUNS="${2:-50}"
WORKDIR="$(mktemp -d /var/tmp/sandgate-bench-XXXXXX)"
RUNSDIR="$(mktemp -d /var/tmp/sandgate-bench-runs-XXXXXX)"
trap 'rm -rf "$WORKDIR" "$RUNSDIR"' EXIT
export SANDGATE_RUNS_DIR="$RUNSDIR"  # every run keeps a directory: here, removed at exit
chmod 0777 "$WORKDIR"  # the sandbox maps to the workspace owner (root-owned → 65534)

if [[ ! -x "$SANDGATE" ]]; then
  echo "sandgate binary not found at $SANDGATE (build it, or pass its path)" >&2
  exit 2
fi
SANDGATE_CMD="$SANDGATE run --workspace $WORKDIR ${SANDGATE_RUN_ARGS:-} -- true"
if ! $SANDGATE_CMD >/dev/null 2>&1; then
  echo "'$SANDGATE_CMD' fails; is 'sandgate run' wired up yet?" >&2
  exit 2
fi

declare -A MEAN_MS
names=(true unshare sandgate bind)
declare -A CMD=([true]="true" [unshare]="unshare -Urn true" [sandgate]="$SANDGATE_CMD"
  [bind]="${SANDGATE_CMD/ -- true/ --workspace-mode bind -- true}")

if command -v hyperfine >/dev/null 2>&1; then
  json="$WORKDIR/hyperfine.json"
  hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$json" \
    -n true "${CMD[true]}" -n unshare "${CMD[unshare]}" -n sandgate "${CMD[sandgate]}" \
    -n bind "${CMD[bind]}" >&2
  while read -r name mean; do MEAN_MS[$name]=$mean; done < <(
    python3 -c 'import json,sys
for r in json.load(open(sys.argv[1]))["results"]: print(r["command"], r["mean"]*1000)' "$json")
else
  echo "hyperfine not installed: timing a bash loop of $RUNS runs each" >&2
  for name in "${names[@]}"; do
    ${CMD[$name]} >/dev/null 2>&1  # warm-up
    start=$(date +%s%N)
    for ((i = 0; i < RUNS; i++)); do ${CMD[$name]} >/dev/null 2>&1; done
    end=$(date +%s%N)
    MEAN_MS[$name]=$(awk -v ns=$((end - start)) -v n="$RUNS" 'BEGIN { printf "%.3f", ns / n / 1e6 }')
  done
fi

printf '%-10s %12s\n' command mean_ms
for name in "${names[@]}"; do printf '%-10s %12.3f\n' "$name" "${MEAN_MS[$name]}"; done
awk -v t="${MEAN_MS[true]}" -v u="${MEAN_MS[unshare]}" -v s="${MEAN_MS[sandgate]}" 'BEGIN {
  printf "sandgate/true    %8.1fx\n", s / t
  printf "sandgate/unshare %8.1fx\n", s / u
  printf "sandgate overhead over unshare: %.3f ms\n", s - u }'
awk -v s="${MEAN_MS[sandgate]}" -v b="${MEAN_MS[bind]}" 'BEGIN {
  printf "overlay workspace over bind: %.3f ms\n", s - b }'

# The cost of collecting a run's changes (changes.json, changes.patch): a 10,000-file tree in
# which the run modifies 100 files, against the same run modifying none (target: under 1 s).
TREE="$WORKDIR/tree"
mkdir -p "$TREE"
for d in $(seq 0 99); do
  mkdir -p "$TREE/d$d"
  for f in $(seq 0 99); do printf 'line %s %s\n' "$d" "$f" >"$TREE/d$d/f$f.txt"; done
done
chmod -R a+rwX "$TREE"
time_run() {  # mean ms of 5 runs of `sandgate run` in the tree with the given script
  local start end
  start=$(date +%s%N)
  for _ in 1 2 3 4 5; do "$SANDGATE" run --workspace "$TREE" -- sh -c "$1" >/dev/null 2>&1; done
  end=$(date +%s%N)
  awk -v ns=$((end - start)) 'BEGIN { printf "%.1f", ns / 5 / 1e6 }'
}
edit='for d in $(seq 0 99); do echo x >> d$d/f1.txt; done'
none=$(time_run "for d in \$(seq 0 99); do :; done")
hundred=$(time_run "$edit")
printf 'run in a 10,000-file tree: %s ms changing nothing, %s ms changing 100 files\n' "$none" "$hundred"
awk -v a="$none" -v b="$hundred" 'BEGIN { printf "collecting 100 changes: %.1f ms\n", b - a }'
