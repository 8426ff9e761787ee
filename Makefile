# Two commands set up everything on a fresh machine: `make demo` and `make test`.
BUILD ?= build
SAN_BUILD ?= build-san
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: setup build test test-release test-sanitize demo bench clean soak install

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD)

test-release: build
	cd $(BUILD) && ctest --output-on-failure

# ASan + UBSan over the unit tests, and bounded libFuzzer runs, with clang.
$(SAN_BUILD)/build.ninja:
	CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHLX_SANITIZE=ON -DHLX_FUZZ=ON

test-sanitize: setup $(SAN_BUILD)/build.ninja
	cmake --build $(SAN_BUILD)
	cd $(SAN_BUILD) && ctest --output-on-failure -E '^(test_|conformance)'

test: test-release test-sanitize

# libhlx.so/.a, include/hlx/hlx.h, bin/hlx, hlx.pc and the CMake package (find_package(hlx)).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	bash scripts/demo.sh $(BUILD)/bin/hlx

bench: build
	$(BUILD)/bin/hlx_bench

# ~2 minutes of mixed HTTP load on `hlx serve`: no RSS growth, no leaked descriptors.
soak: build
	/usr/bin/python3 tests/server/soak.py --hlx $(BUILD)/bin/hlx

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
