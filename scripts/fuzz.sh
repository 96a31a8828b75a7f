#!/usr/bin/env bash
# Runs every libFuzzer harness of BUILD_DIR (built with -DCFORMERS_FUZZ=ON) for SECONDS
# each, one after the other (`make fuzz FUZZ_SECONDS=N`; CI runs it after the suite).
#
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
#
# Each target starts from BUILD_DIR/fuzz/corpus/<target> (a scratch corpus, kept between
# runs, where new inputs go) plus the committed seeds tests/fuzz/corpus/<target>, with
# tests/fuzz/<target>.dict when there is one. A crash, leak, timeout or out-of-memory stops
# that target and leaves its input in BUILD_DIR/fuzz/crashes/<target>/; commit it under
# tests/fuzz/regressions/<target>/ so the test suite replays it. Prints one line per target
# (runs, execs/s, coverage) and exits 1 when any target failed.
set -uo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)/tests/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$src"/fuzz_*.c; do
    t=$(basename "$f" .c)
    [ "$t" = fuzz_util ] || targets+=("${t#fuzz_}")
  done
fi

# Files the harnesses stage go to a directory of this run, removed even after a crash.
export CFORMERS_FUZZ_TMPDIR
CFORMERS_FUZZ_TMPDIR=$(mktemp -d /dev/shm/cformers-fuzz-run-XXXXXX)
trap 'rm -rf "$CFORMERS_FUZZ_TMPDIR"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export CFORMERS_THREADS=${CFORMERS_THREADS:-1}

failed=()
printf '%-16s %10s %9s %8s %8s %7s  %s\n' target runs execs/s cov ft corpus result
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$t
  corpus=$build/fuzz/corpus/$t
  crashes=$build/fuzz/crashes/$t
  log=$build/fuzz/logs/$t.log
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1
        -artifact_prefix="$crashes/")
  [ -f "$src/$t.dict" ] && args+=(-dict="$src/$t.dict")
  if [ ! -x "$bin" ]; then
    echo "$t: $bin is missing (configure with -DCFORMERS_FUZZ=ON and build target fuzz_all)" >&2
    failed+=("$t")
    continue
  fi
  # In a subshell that outlives it, so bash's "Aborted" notice goes to the log too.
  ("$bin" "${args[@]}" "$corpus" "$src/corpus/$t"; exit $?) >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  files=$(find "$corpus" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc): $(ls -t "$crashes" 2>/dev/null | head -1 | sed "s|^|$crashes/|"), log $log"
    failed+=("$t")
  fi
  printf '%-16s %10s %9s %8s %8s %7s  %s\n' "$t" "${runs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "$files" "$result"
  if [ $rc -ne 0 ]; then
    grep -m1 -E 'ERROR: |runtime error|out-of-memory|SUMMARY' "$log" | sed 's/^/    /'
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failing targets: ${failed[*]} (inputs under $build/fuzz/crashes/)" >&2
  exit 1
fi
