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

# The main job on the model that ships with the repo. Until `deltabit chat` and the trained default
# model land, that is the tiny binary Qwen3.5 test model: convert it to a proven Q1_0 GGUF, describe
# it, and compute its logits for a few tokens.
TINY_HF = tests/fixtures/qwen3_5_binary
TINY_GGUF = $(BUILD_DIR)/tiny-qwen35.q1_0.gguf
run: build
	@$(BUILD_DIR)/deltabit convert $(TINY_HF) -o $(TINY_GGUF) --type q1_0
	@$(BUILD_DIR)/deltabit info $(TINY_GGUF)
	@$(BUILD_DIR)/deltabit logits -m $(TINY_GGUF) --ids 1,2,3,4 -o $(BUILD_DIR)/tiny-logits.bin

# libFuzzer targets for the file parsers, built with clang; FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: setup
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) build-fuzz
