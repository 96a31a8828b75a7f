#!/usr/bin/env bash
# The README's tour is a test: scripts/tour.sh (`make tour`) runs every command of its
# "A tour" block, in order, in a fresh directory, and each exits 0; here with --short
# (training schedules of 8 steps, `--steps 200` becoming 4 and `--steps 400` 8, GEMM
# benchmarks one small repetition); the MPI lines run when mpirun is there.
#
# Without the shared assets (a fresh clone; CTest's cli_readme_tour_no_assets points
# CFORMERS_DATA_DIR at an empty directory so that CI, whose clone has them, runs this path
# too) the tour runs on what `make demo` falls back to, Debian's fortunes and a byte-level
# BPE trained on them (scripts/tour.sh says how). Skipped when the fortunes are not
# installed either.
. "$(dirname "$0")/lib_cli.sh"
src=$(cd "$src" && pwd)
[ -f "$src/README.md" ] || { echo "SKIP: no $src/README.md"; exit 77; }
export CFORMERS_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
export BUILD=$(cd "$(dirname "$bin")" && pwd)
run="$tmp/tour"
bash "$src/scripts/tour.sh" --short --log "$tmp/log" --dir "$run" >"$tmp/out" 2>&1
rc=$?
[ $rc = 77 ] && { cat "$tmp/out"; echo "SKIP: neither the shared assets nor Debian's fortunes are here"; exit 77; }
[ $rc = 0 ] || { fail_because "the tour failed (exit $rc)"; tail -n 20 "$tmp/out"; }
ran=$(grep -c '^\$ ' "$tmp/out")
[ "$ran" -ge 20 ] || fail_because "the tour ran $ran commands"
# Without the assets it says so, and what it stands in.
if [ ! -e "$CFORMERS_DATA_DIR/tinyshakespeare/input.txt" ]; then
    grep -q "the tour runs on Debian's fortunes" "$tmp/out" || fail_because "no word of the fortunes fallback"
    grep -q "^== skipped (no pretrained stories260K" "$tmp/out" || fail_because "the stories260K import was not stood in for"
fi
# What the tour promises along the way.
[ -f "$run/out/run/checkpoint_step8.ckpt" ] || fail_because "the resumed run did not reach its end: $(ls "$run/out/run")"
bytes=$(ls -1 "$run"/out/bytes/shakespeare_step*.ckpt 2>/dev/null | sort -V | tail -n 1)
[ -n "$bytes" ] && "$bin" generate --model "$bytes" --prompt "ROMEO:" -n 4 >/dev/null 2>&1 ||
    fail_because "the byte-level checkpoint '$bytes' does not generate without --tokenizer"
# The safetensors export carries the checkpoint's tokenizer, as the README says.
[ -f "$run/out/hf/tokenizer.model" ] || [ -f "$run/out/hf/tokenizer.json" ] ||
    fail_because "out/hf has no tokenizer: $(ls "$run/out/hf")"
grep -q "tokenizer.model\` (SentencePiece" "$src/README.md" && grep -q "tokenizer.json\` (a byte-level BPE" "$src/README.md" ||
    fail_because "the README does not say which tokenizer file the export carries"
# Every training line of the tour stops early (a newcomer should not wait for 1000 steps).
grep -E '(\$B train|-- train) ' "$run/commands" | grep -v -- '--steps ' | grep . &&
    fail_because "training lines of the tour without --steps"
# `make tour` and `make demo` build the cformers binary alone before they run, not every
# test, fuzzer and benchmark (make -n: the commands, none run).
if command -v make >/dev/null; then
    make -n -C "$src" --no-print-directory demo tour >"$tmp/make" 2>&1 || fail_because "make -n demo tour: $(cat "$tmp/make")"
    [ "$(grep -c 'cmake --build' "$tmp/make")" -ge 1 ] && ! grep 'cmake --build' "$tmp/make" | grep -qv -- '--target cformers_cli' ||
        fail_because "make demo / tour build more than the binary: $(grep 'cmake --build' "$tmp/make")"
    grep -q 'scripts/demo.sh' "$tmp/make" && grep -q 'scripts/tour.sh' "$tmp/make" || fail_because "make demo / tour run nothing"
fi
finish cli_readme_tour
