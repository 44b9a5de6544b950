# Thin wrapper over CMake. `make demo` and `make check` are all a fresh
# Debian 12 machine needs: each installs what is missing, then builds.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure check demo asan tsan fuzz install clean

all: configure
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

setup:
	@sh scripts/setup

configure: setup
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

check: all
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The demo needs only the tool; build it quietly (errors are shown again).
demo: configure
	@echo "strata: building build/bin/strata ..."
	@cmake --build $(BUILD) -j $(JOBS) --target strata_cli >/dev/null 2>&1 || \
		cmake --build $(BUILD) --target strata_cli -- --no-print-directory
	@sh scripts/demo $(BUILD)

# The suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: setup
	@$(MAKE) --no-print-directory check BUILD=build-asan CMAKE_FLAGS="-DSTRATA_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"

# The suite under ThreadSanitizer (without CUDA), in build-tsan/, optimised
# as TSan advises (-O2 -g: -O0 makes it about 5x slower). Every process's
# reports, the tests' and those of the strata they start (the server under
# the node clients), go to build-tsan/tsan-reports/; any report fails it.
TSAN_REPORTS = $(CURDIR)/build-tsan/tsan-reports
tsan: setup
	@rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	@TSAN_OPTIONS="log_path=$(TSAN_REPORTS)/report $${TSAN_OPTIONS:-}" \
		$(MAKE) --no-print-directory check BUILD=build-tsan \
		CMAKE_FLAGS="-DSTRATA_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"; \
	rc=$$?; \
	if ls $(TSAN_REPORTS)/report.* >/dev/null 2>&1; then \
		echo "make tsan: ThreadSanitizer reports in $(TSAN_REPORTS):"; \
		head -60 $(TSAN_REPORTS)/report.*; exit 1; \
	fi; \
	exit $$rc

# libFuzzer targets (clang); run them with scripts/fuzz.
fuzz: setup
	@$(MAKE) --no-print-directory all BUILD=build-fuzz CMAKE_FLAGS="-DSTRATA_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The library, headers, strata.pc, the tool and its man page under PREFIX
# (default /usr/local): lib/libstrata.so and .a, include/strata/*.h,
# lib/pkgconfig/strata.pc, bin/strata, share/man/man1/strata.1.
PREFIX ?= /usr/local
install: all
	@cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-tsan build-fuzz
