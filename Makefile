# Thin wrapper around CMake. `make test` is what CI runs (see .ci/run).
#   make            build (Release) into build/
#   make check      what CI runs: the suite with gcc, then under ASan+UBSan with clang, warnings as errors
#   make test       install missing packages, build, run the test suite
#   make test-sanitize   the same under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make fuzz       run every libFuzzer harness FUZZ_SECONDS (default 60) each (build-fuzz/, clang)
#   make demo       train a small LLaMA on Tiny Shakespeare and generate from it (builds only the binary)
#   make tour       run the README's tour, command by command, in output/tour (builds only the binary)
#   make bench-gemm / bench-train / bench-data / bench-fusion / bench-generate / bench-pool / bench-denormals /
#        bench-dp / bench-serve / bench-ckpt-delta / bench-recovery / bench-ckpt-stall / bench-llamacpp
CC ?= cc
JOBS ?= $(shell nproc)
BUILD ?= build
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
# What CI gives each harness inside `make check`.
CHECK_FUZZ_SECONDS ?= 20

.PHONY: all deps configure build cli tour check test test-sanitize fuzz clean demo bench-gemm bench-train bench-data bench-fusion bench-generate bench-pool bench-denormals bench-dp bench-serve bench-ckpt-delta bench-recovery bench-ckpt-stall bench-llamacpp

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_C_COMPILER=$(CC) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The cformers binary alone (not the tests, fuzzers and benchmarks `build` makes).
cli: configure
	@cmake --build $(BUILD) -j $(JOBS) --target cformers_cli

check:
	@$(MAKE) --no-print-directory test CC=gcc BUILD=build-gcc CMAKE_FLAGS=-DCFORMERS_WERROR=ON
	@$(MAKE) --no-print-directory test-sanitize CC=clang CMAKE_FLAGS=-DCFORMERS_WERROR=ON
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(CHECK_FUZZ_SECONDS) CMAKE_FLAGS=-DCFORMERS_WERROR=ON

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: deps
	@cmake -S . -B build-asan -DCMAKE_C_COMPILER=$(CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCFORMERS_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && CFORMERS_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

# Crash inputs stay in build-fuzz/fuzz/crashes/<target>/; commit them under tests/fuzz/regressions/.
fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCFORMERS_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

demo: cli
	@BUILD=$(BUILD) bash scripts/demo.sh

tour: cli
	@BUILD=$(BUILD) bash scripts/tour.sh

bench-gemm: build
	@$(BUILD)/bench/bench_gemm

bench-train: build
	@bash bench/bench_train.sh

bench-data: build
	@bash bench/bench_data.sh

bench-fusion: build
	@$(BUILD)/bench/bench_fusion

bench-generate: build
	@bash bench/bench_generate.sh

bench-pool: build
	@$(BUILD)/bench/bench_pool

bench-denormals: build
	@$(BUILD)/bench/bench_denormals

bench-dp: build
	@python3 bench/bench_dp.py --build $(BUILD)

bench-ckpt-delta: build
	@bash bench/bench_ckpt_delta.sh

bench-recovery: build
	@bash bench/bench_recovery.sh

bench-ckpt-stall: build
	@bash bench/bench_ckpt_stall.sh

# llama.cpp as the decode/prefill peer (built from PyPI's llama-cpp-python sdist outside the
# repository on first use): see bench/bench_llamacpp.sh.
bench-llamacpp: build
	@bash bench/bench_llamacpp.sh $$([ -x "$${LLAMACPP_DIR:-/tmp/cformers-llamacpp}/build/bin/llama-bench" ] || echo --build-llamacpp)

# BENCH_SERVE_ARGS, e.g. "--requests 32 --concurrency 1,16": see bench/bench_serve.py --help.
# llama.cpp's llama-server runs the same load when $LLAMACPP_DIR/build/bin/llama-server exists
# (`bash bench/llamacpp_build.sh llama-server` builds it outside the repository; never in CI).
bench-serve: build
	@python3 bench/bench_serve.py --bin $(BUILD)/cformers $(BENCH_SERVE_ARGS)

clean:
	rm -rf build build-gcc build-asan build-fuzz
