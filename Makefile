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

# The main job on the model that ships with the repo (models/README.md): a 14M-parameter byte-level
# hybrid (Gated DeltaNet + gated attention, the Qwen3.5 layout) that deltabit's own trainer taught English
# from Debian's dictionaries, the KJV and fortunes, stored at 1 bit (2 MB). It learned text, not
# conversation: the chat shows what it writes after a plain "user: ... assistant:" layout, and /stats
# after each turn shows the second turn reusing the first one's state.
# `deltabit chat -m $(DEFAULT_MODEL)` is the same chat, interactive.
# It builds the deltabit binary only (about half of what `make build` compiles: no tests, benchmarks or
# tools), so a fresh clone reaches the chat sooner; `make test` builds the rest in the same folder.
DEFAULT_MODEL = models/bytelm-hybrid-14m.q1_0.gguf
run: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target deltabit
	@printf 'Hello\n/stats\nTell me about the sea\n/stats\n' | $(BUILD_DIR)/deltabit chat -m $(DEFAULT_MODEL) --max-tokens 120

# libFuzzer targets for the file parsers, built with clang; FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: setup
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) build-fuzz
