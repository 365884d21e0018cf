# Thin wrapper over CMake presets for the README's commands.
#   make run        build (release), show the bundled model's streaming plan and run a prompt
#                   through its chat template
#   make test       build, fetch the larger fixtures, run the whole test suite (ctest)
#   make test-asan  the unit and model tests under AddressSanitizer + UBSan
#   make test-tsan  the threaded tests (ctest label "threaded") under ThreadSanitizer
#   make fuzz       the libFuzzer targets: the GGUF reader for FUZZ_SECONDS, the tokenizer and the
#                   whole-model target for half that each (needs clang)
MODEL ?= tests/fixtures/trained-qwen3moe/model-q4_k_m.gguf
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60

.PHONY: all setup build run test test-asan test-tsan fuzz clean

all: build

setup:
	@scripts/setup.sh

build: setup
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

PROMPT ?= Extract name and city: In Dublin, Paula turned 54.

run: build
	./build/release/bin/gmlx validate $(MODEL)
	./build/release/bin/gmlx run $(MODEL) --temp 0 -n 64 -p "$(PROMPT)"

test: build
	scripts/fetch-fixtures.sh
	ctest --preset release -j $(JOBS)

test-asan: setup
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)
	scripts/fetch-fixtures.sh
	ctest --preset asan -j $(JOBS) -LE slow

test-tsan: setup
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS) --target threaded-tests
	scripts/fetch-fixtures.sh
	ctest --preset tsan -j $(JOBS)

fuzz:
	@scripts/setup.sh --with-fuzz
	tests/fuzz/run-fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf build
