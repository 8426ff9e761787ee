# Two commands set up everything on a fresh machine: `make demo` and `make test`.
BUILD ?= build
SAN_BUILD ?= build-san
TSAN_BUILD ?= build-tsan
CMAKE_FLAGS ?=
# CI runs `make test WERROR=ON` (.ci/run): a compiler warning in project sources fails its build.
WERROR ?= OFF
PREFIX ?= /usr/local

.PHONY: setup build test test-release test-sanitize test-tsan demo bench bench-peer clean soak install format format-check

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DHLX_WERROR=$(WERROR) $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD)

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j2

# ASan + UBSan over the unit tests, and bounded libFuzzer runs, with clang. Two test binaries at a
# time: under the sanitizers each runs mostly on one core (a quiet fresh-clone run measured load
# 1.0 for its 28 minutes); they share no files (mkdtemp, TempDir + pid) and assert no timings. -O1
# (ASan's recommended level) because the kernels' intrinsics at -O0 made the tests the longest step
# of CI (-Wno-pass-failed: clang 14 at -O1 does not run the loop vectorizer, so each `omp simd` loop
# reports that it was not vectorized; a remark about this tree's speed, not a defect); line tables
# instead of full debug info (reports keep file:line) and no benchmark binary.
$(SAN_BUILD)/build.ninja:
	CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHLX_SANITIZE=ON -DHLX_FUZZ=ON -DHLX_WERROR=$(WERROR) \
	  -DHLX_BENCH=OFF -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only -Wno-pass-failed" \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only -Wno-pass-failed"

test-sanitize: setup $(SAN_BUILD)/build.ninja
	cmake --build $(SAN_BUILD)
	cd $(SAN_BUILD) && ctest --output-on-failure -j2 -E '^(test_|conformance)'

# ThreadSanitizer over the code that shares memory between threads: the runtime's pool (and the
# kernels it runs) and the batch engine with its submit/cancel threads. Only these two test
# binaries are built. halt_on_error makes any report fail the run.
# -O1 with line tables compiles ~35 % faster than RelWithDebInfo's -O2 -g under TSan.
$(TSAN_BUILD)/build.ninja:
	CC=clang CXX=clang++ cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHLX_TSAN=ON -DHLX_WERROR=$(WERROR) \
	  -DHLX_BENCH=OFF -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG"

TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp"
test-tsan: setup $(TSAN_BUILD)/build.ninja
	cmake --build $(TSAN_BUILD) --target hlx_runtime_tests hlx_engine_tests
	$(TSAN_ENV) $(TSAN_BUILD)/bin/hlx_runtime_tests --gtest_filter='ParallelFor.*:PackedWeightTiles.*:Gemm.*:DotGroup.*:PackedWeightInt8.*:PackedWeight.*:PackedWeightInt4.*:Attention.*:NativeAttention.*'
	$(TSAN_ENV) $(TSAN_BUILD)/bin/hlx_engine_tests --gtest_filter='*BatchEngine*:SessionCancel.*'

test: format-check test-release test-sanitize test-tsan

# .clang-format over every C and C++ file git tracks: `format` rewrites them, `format-check` (part of
# `make test`) fails naming the files it would change.
FORMAT_FILES = $(shell git ls-files '*.cc' '*.h' '*.c')
format: setup
	clang-format -i $(FORMAT_FILES)
format-check: setup
	@files=$$(clang-format --dry-run $(FORMAT_FILES) 2>&1 | grep 'code should be clang-formatted' | cut -d: -f1 | sort -u); \
	  if [ -n "$$files" ]; then echo "not formatted (run make format):" $$files; exit 1; fi

# libhlx.so/.a, include/hlx/hlx.h, bin/hlx, hlx.pc and the CMake package (find_package(hlx)).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	bash scripts/demo.sh $(BUILD)/bin/hlx

bench: build
	$(BUILD)/bin/hlx_bench

# Issue 26's peer: llama.cpp (node-llama-cpp's prebuilt CPU addon; bench/peer, not part of `make
# test`) batch-1 decode and prefill 512, 2 threads, on Q4_0 and bf16 GGUF copies of PEER_MODEL
# (default: the random-weight Qwen3-0.6B fixture), after checking the bf16 copy's logits against hlx.
# `npm install` from the lock file: `npm ci` refuses it, as 3.22.1's optional mac/win builds are absent.
PEER_MODEL ?= $(BUILD)/peer/fx
PEER_ARGS ?=
bench-peer: build
	npm install --prefix bench/peer --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error
	test -f $(PEER_MODEL)/config.json || $(BUILD)/bin/hlx fixture --family qwen3 --preset qwen3-0.6b --dtype bf16 --out $(PEER_MODEL) --no-tokenizer
	/usr/bin/python3 bench/peer/hf_to_gguf.py $(PEER_MODEL) $(BUILD)/peer/q4_0.gguf --type q4_0
	/usr/bin/python3 bench/peer/hf_to_gguf.py $(PEER_MODEL) $(BUILD)/peer/bf16.gguf --type bf16
	/usr/bin/python3 bench/peer/check_logits.py --hlx $(BUILD)/bin/hlx --checkpoint $(PEER_MODEL) $(BUILD)/peer/bf16.gguf
	node bench/peer/decode_bench.mjs $(BUILD)/peer/q4_0.gguf $(PEER_ARGS)
	node bench/peer/decode_bench.mjs $(BUILD)/peer/bf16.gguf $(PEER_ARGS)

# ~2 minutes of mixed HTTP load on `hlx serve`: no RSS growth, no leaked descriptors.
soak: build
	/usr/bin/python3 tests/server/soak.py --hlx $(BUILD)/bin/hlx

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD)
