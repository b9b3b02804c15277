# Thin wrapper over CMake. The README's two commands: `make demo` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_CC    ?= clang-14
JOBS       ?= $(shell nproc)

.PHONY: all deps build build-asan test test-fast test-asan test-gpu demo clean docs fuzz

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPRM_SANITIZE=address,undefined >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# The whole suite twice: once as built, once under ASan+UBSan.
test: build build-asan
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 ctest --output-on-failure -j $(JOBS)

# The GPU tests (ctest label gpu: the CUDA backend against the CPU kernels
# and the CPU model); each reports skipped where the module, the driver or a
# GPU is missing.
test-gpu: build
	@test -f $(BUILD)/libprimus-cuda.so || { echo "test-gpu: no $(BUILD)/libprimus-cuda.so (CMake found no nvcc; PRM_CUDA=ON says why)" >&2; exit 1; }
	@cd $(BUILD) && ctest --output-on-failure -L gpu

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The libFuzzer harnesses of tests/fuzz (docs/fuzzing.md), a clang build of
# their own; `make fuzz FUZZ_SECONDS=N` also runs each for N seconds
# (FUZZ_CPU_SECONDS=N: until each has used N CPU-seconds).
# (`make test` replays their corpus in the ASan build: fuzz-smoke-*.)
fuzz: deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: $(FUZZ_CC) not found (apt-get install clang-14, or FUZZ_CC=clang)" >&2; exit 1; }
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DPRM_FUZZ=ON -DPRM_CUDA=OFF -DPRM_WERROR=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz-harnesses
ifneq ($(FUZZ_SECONDS)$(FUZZ_CPU_SECONDS),)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CPU_SECONDS=$(FUZZ_CPU_SECONDS) cmake --build $(FUZZ_BUILD) --target fuzz-run
endif

demo: build
	@bash scripts/demo.sh $(BUILD)

docs: build
	@$(BUILD)/primus docs --output docs/cli

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
