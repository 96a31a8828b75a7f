#!/usr/bin/env bash
# Runs the Python package's pytest suite (python/tests) against the shared library of this
# build. Usage: python_test.sh LIBCFORMERS_SO CFORMERS_BIN. The interpreter is
# $CFORMERS_PYTHON, else Debian's /usr/bin/python3, else python3: the first that has pytest
# and NumPy (python3-pytest, python3-numpy; scripts/install-deps.sh). Without one the test
# is skipped (exit 77) with a message.
set -u
lib="$1" bin="$2"
src="${CFORMERS_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
python=""
for p in ${CFORMERS_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import pytest, numpy' >/dev/null 2>&1; then
        python="$p"
        break
    fi
done
if [ -z "$python" ]; then
    echo "SKIP: no python3 with pytest and numpy (apt-get install python3-pytest python3-numpy)"
    exit 77
fi
export CFORMERS_LIBRARY="$lib" CFORMERS_BIN="$bin" CFORMERS_SOURCE_DIR="$src" CFORMERS_THREADS=1
export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
cd "$(mktemp -d /tmp/cformers_py.XXXXXX)" || exit 1
trap 'rm -rf "$PWD"' EXIT
exec "$python" -m pytest -q -p no:cacheprovider -W ignore::UserWarning "$src/python/tests"
