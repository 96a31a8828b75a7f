#!/usr/bin/env bash
# libcformers.so exports only the public API: every dynamic symbol it defines is declared
# in a public header (include/cformers/*.h) and carries the cf_ prefix; every global name
# of the engine archive (libcformers.a, internal ones included) carries cf_ (or CF_).
#   check_exports.sh LIBCFORMERS_SO INCLUDE_DIR [LIBCFORMERS_A]
set -u
lib="$1"
inc="$2"
archive="${3:-}"
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u)
[ -n "$syms" ] || { echo "FAIL: $lib exports nothing (nm failed?)"; exit 1; }
bad=0
count=0
for s in $syms; do
    count=$((count + 1))
    case "$s" in
    _init | _fini) continue ;;
    cf_*) ;;
    *) echo "FAIL: $lib exports $s, which lacks the cf_ prefix"; bad=$((bad + 1)); continue ;;
    esac
    if ! grep -qw -- "$s" "$inc"/cformers/*.h; then
        echo "FAIL: $lib exports $s, which no public header declares"
        bad=$((bad + 1))
    fi
done
echo "$count exported symbols checked"
if [ -n "$archive" ]; then
    for s in $(nm --defined-only -g "$archive" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBRCVW]$/ {print $3}' | sort -u); do
        case "$s" in
        cf_* | CF_*) ;;
        *) echo "FAIL: $archive defines the global $s, which lacks the cf_ prefix"; bad=$((bad + 1)) ;;
        esac
    done
fi
[ "$bad" -eq 0 ] || exit 1
