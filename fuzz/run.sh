#!/usr/bin/env bash
# Builds the libFuzzer targets (when needed) and runs them.
#
#   fuzz/run.sh TARGET SECONDS [LIBFUZZER_ARG...]   one target for a long run: at most SECONDS
#                                                    (and at most SANDGATE_FUZZ_RUNS executions
#                                                    when set), niced, new inputs kept in
#                                                    build-fuzz/corpus/TARGET
#   fuzz/run.sh --smoke [SECONDS]                    every target over its seed corpus, then
#                                                    SECONDS (default 30) of fresh inputs; CI
#   fuzz/run.sh --list                               the targets (h2_streams_fuzz last: not in the
#                                                    smoke, built on demand by its own run)
#   fuzz/run.sh --build                              only build
#
# A crash (or a property a target checks) stops the run with the input saved under
# build-fuzz/artifacts/TARGET/; commit it to fuzz/corpus/TARGET/ once fixed, as a regression
# input. SANDGATE_FUZZ_BUILD_DIR (default build-fuzz) is the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${SANDGATE_FUZZ_BUILD_DIR:-build-fuzz}
targets=(request_head_fuzz chunked_body_fuzz client_hello_fuzz dns_message_fuzz
         config_loader_fuzz body_decoder_fuzz encoding_fuzz scrubber_fuzz path_rules_fuzz
         llm_body_fuzz h2_frames_fuzz git_wire_fuzz)

build_fuzzers() {
  ./scripts/deps.sh
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  if [ ! -f "$build/build.ninja" ]; then
    # The compiler is fixed when a build directory is configured: clang here, whatever CC/CXX
    # the caller has.
    CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSANDGATE_FUZZ=ON >/dev/null
  fi
  ninja -C "$build" fuzzers
}

# Targets outside the smoke's default list, built on demand (they need the proxy library:
# docs/fuzzing.md).
extra_targets=(h2_streams_fuzz)

# run TARGET WORK_CORPUS LIBFUZZER_ARG...: the target on its work corpus and its seeds, started
# through ${launch[@]} when set.
launch=()
run_target() {
  local target=$1 work=$2
  shift 2
  local seeds="fuzz/corpus/$target" artifacts="$build/artifacts/$target"
  mkdir -p "$work" "$artifacts"
  # ASan's leak check at exit and UBSan stop at the first error (UBSan's report would
  # otherwise only be printed); -print_final_stats gives the execution count.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ${launch[@]+"${launch[@]}"} "$build/fuzz/$target" -print_final_stats=1 -timeout=25 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" "$@" "$work" "$seeds"
}

case "${1:-}" in
  --list)
    printf '%s\n' "${targets[@]}" "${extra_targets[@]}"
    ;;
  --build)
    build_fuzzers
    ;;
  --smoke)
    seconds=${2:-30}
    build_fuzzers
    passed=0 failed=0 failures=()
    for t in "${targets[@]}"; do
      # A fresh work corpus: the smoke starts from the committed seeds alone, and writes
      # nothing into the source tree.
      work=$(mktemp -d)
      log="$build/smoke-$t.log"
      start=$SECONDS
      if run_target "$t" "$work" -max_total_time="$seconds" >"$log" 2>&1; then
        passed=$((passed + 1))
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        echo "fuzz smoke: $t ok, ${runs:-?} executions in $((SECONDS - start)) s"
      else
        failed=$((failed + 1))
        failures+=("$t")
        echo "fuzz smoke: $t FAILED ($log):"
        tail -n 40 "$log" | sed 's/^/  /'
      fi
      rm -rf "$work"
    done
    [ ${#failures[@]} -eq 0 ] || echo "fuzz smoke: failed: ${failures[*]}"
    echo "fuzz: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    ;;
  ""|-h|--help)
    sed -n '2,18p' "$0"
    ;;
  *)
    target=$1
    seconds=${2:?"usage: fuzz/run.sh TARGET SECONDS [LIBFUZZER_ARG...]"}
    shift 2
    printf '%s\n' "${targets[@]}" "${extra_targets[@]}" | grep -qx "$target" || {
      echo "fuzz/run.sh: unknown target '$target' (fuzz/run.sh --list)" >&2
      exit 2
    }
    build_fuzzers
    if printf '%s\n' "${extra_targets[@]}" | grep -qx "$target"; then
      ninja -C "$build" "$target"
    fi
    runs=()
    [ -z "${SANDGATE_FUZZ_RUNS:-}" ] || runs=(-runs="$SANDGATE_FUZZ_RUNS")
    # Long runs share the machine: at the lowest priority but one, one process.
    launch=(nice -n 15)
    run_target "$target" "$build/corpus/$target" -max_total_time="$seconds" \
      ${runs[@]+"${runs[@]}"} "$@"
    ;;
esac
