#!/usr/bin/env bash
# Builds llama.cpp targets (llama-bench, llama-server) for the peer benchmarks, outside the
# repository, from the llama.cpp sources vendored in PyPI's llama-cpp-python sdist. Never part
# of CI (about half an hour on 2 cores for llama-bench, more with llama-server); the bench
# scripts call it on request (bench_llamacpp.sh --build-llamacpp, bench_serve.py
# --build-llamacpp).
#
#   bash bench/llamacpp_build.sh TARGET...        e.g. llama-bench llama-server
#
# env: LLAMACPP_DIR (default /tmp/cformers-llamacpp: the sources, build/ and build/bin/TARGET);
#      LLAMACPP_SDIST (a downloaded llama_cpp_python-*.tar.gz to build from instead of
#      `pip download`). The sdist is downloaded and unpacked once; later calls reuse the
#      unpacked sources and the build directory (reconfigured with the options below, so a
#      build made without the server gains it), and rebuild only what is missing.
set -euo pipefail
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/cformers-llamacpp}
die() { echo "llamacpp_build: $*" >&2; exit 1; }
[ $# -gt 0 ] || die "usage: bash bench/llamacpp_build.sh TARGET..."

mkdir -p "$LLAMACPP_DIR"
src=$(ls -d "$LLAMACPP_DIR"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1 || true)
if [ -z "$src" ]; then
    sdist=${LLAMACPP_SDIST:-}
    if [ -z "$sdist" ]; then
        python3 -m pip download --no-binary :all: --no-deps -d "$LLAMACPP_DIR" llama-cpp-python >&2
        sdist=$(ls -t "$LLAMACPP_DIR"/llama_cpp_python-*.tar.gz | head -1)
    fi
    [ -f "$sdist" ] || die "no llama-cpp-python sdist at '$sdist'"
    tar xzf "$sdist" -C "$LLAMACPP_DIR"
    src=$(ls -d "$LLAMACPP_DIR"/llama_cpp_python-*/vendor/llama.cpp | head -1)
fi
[ -f "$src/CMakeLists.txt" ] || die "$src holds no llama.cpp sources"
# CPU only, no network at build or run time: no curl/openssl, and the server without its web
# UI (neither built with npm nor downloaded).
cmake -S "$src" -B "$LLAMACPP_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
for t in "$@"; do
    nice -n 10 cmake --build "$LLAMACPP_DIR/build" -j"$(nproc)" --target "$t" >&2
    [ -x "$LLAMACPP_DIR/build/bin/$t" ] || die "the build made no $LLAMACPP_DIR/build/bin/$t"
done
