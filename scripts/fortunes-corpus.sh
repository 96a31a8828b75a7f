#!/usr/bin/env bash
# The stand-in for the shared assets on a machine without them (a fresh clone), used by
# `make demo` (scripts/demo.sh) and the README tour's test (tests/cli_readme_tour.sh):
# the text of Debian's `fortunes` package (FORTUNES_DIR, default /usr/share/games/fortunes,
# installed by scripts/install-deps.sh) as OUT/fortunes.txt, and a 512-token byte-level BPE
# tokenizer trained on it with `cformers tokenizer train` as OUT/tokenizer.json.
#   usage: scripts/fortunes-corpus.sh CFORMERS_BINARY OUT
# Exits 1 with a message when the fortunes are not installed.
set -euo pipefail
BIN=$1 OUT=$2
FORTUNES=${FORTUNES_DIR:-/usr/share/games/fortunes}
# Each fortune file is plain text with "%" lines between the entries (the .dat files are
# their indexes, the .u8 names links to them).
mapfile -t files < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' 2>/dev/null | sort)
[ ${#files[@]} -gt 0 ] || {
    echo "no Debian fortunes in $FORTUNES: run scripts/install-deps.sh (or set CFORMERS_DATA_DIR)" >&2
    exit 1
}
mkdir -p "$OUT"
sed 's/^%$//' "${files[@]}" >"$OUT/fortunes.txt"
echo "== corpus: Debian's fortunes (${#files[@]} files, $(wc -c <"$OUT/fortunes.txt") bytes)"
echo "== training a 512-token byte-level BPE tokenizer on it"
"$BIN" tokenizer train --input "$OUT/fortunes.txt" --vocab-size 512 --output "$OUT/tokenizer.json" --quiet
