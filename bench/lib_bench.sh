# Shared by the bench/*.sh scripts that train on the demo data, sourced from the repository
# root with the script's name as $1:
#   BIN                 the cformers binary (BUILD, default build)
#   TEXT, TOKENIZER     Tiny Shakespeare and the stories260K tokenizer (CFORMERS_DATA_DIR,
#                       default ../shared/data); the script exits 1 naming them if missing
#   OUT                 a scratch directory, removed at exit (add to it with on_exit)
#   demo_data DIR       preprocesses TEXT with TOKENIZER into DIR (5% held out)
BENCH_NAME=$1
BIN=$(realpath "${BUILD:-build}/cformers")
DATA=${CFORMERS_DATA_DIR:-../shared/data}
TEXT=$DATA/tinyshakespeare/input.txt
TOKENIZER=$DATA/stories260K/tok512.model
[ -f "$TEXT" ] && [ -f "$TOKENIZER" ] ||
    { echo "$BENCH_NAME: needs $TEXT and $TOKENIZER (CFORMERS_DATA_DIR)" >&2; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/cformers_$BENCH_NAME.XXXXXX")
BENCH_ON_EXIT=""
on_exit() { BENCH_ON_EXIT="$BENCH_ON_EXIT$1; "; }
trap 'eval "$BENCH_ON_EXIT" || true; rm -rf "$OUT"' EXIT
demo_data() {
    "$BIN" preprocess --input "$TEXT" --tokenizer "$TOKENIZER" --output "$1" --valid-fraction 0.05 --quiet
}
