# Thin wrapper over CMake. `make run` and `make test` are the two commands a new user needs.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build test run fuzz clean

setup:
	@scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Builds everything and runs every test (CUDA tests skip without a GPU), then a short fuzz run.
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-30}

# The main job on the model that ships with the repo.
run: build
	@$(BUILD_DIR)/deltabit info tests/fixtures/tiny-qwen35.gguf

# libFuzzer targets for the file parsers, built with clang; FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: setup
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) build-fuzz
