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

# The main job on the model that ships with the repo: a chat. Until the trained default model lands,
# that is the tiny binary Qwen3.5 test model (random weights, so its replies are noise): convert it to
# a proven Q1_0 GGUF, then chat with it from a script — two turns, with /stats after each to show the
# second turn reusing the first one's state. `deltabit chat -m $(TINY_GGUF) --max-tokens 32` is the
# same chat, interactive.
TINY_HF = tests/fixtures/qwen3_5_binary
TINY_GGUF = $(BUILD_DIR)/tiny-qwen35.q1_0.gguf
run: build
	@$(BUILD_DIR)/deltabit convert $(TINY_HF) -o $(TINY_GGUF) --type q1_0
	@printf 'Hello\n/stats\nTell me more\n/stats\n' | $(BUILD_DIR)/deltabit chat -m $(TINY_GGUF) --max-tokens 32

# libFuzzer targets for the file parsers, built with clang; FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: setup
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) build-fuzz
