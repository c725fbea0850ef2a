# metaformer.h - build, test and benchmark
#   make test      header hygiene + every test, optimized and under ASan/UBSan (the CI command)
#   make examples  build/hello ...
#   make bench     SGEMM vs OpenBLAS (installs libopenblas-dev when missing and allowed)
CC      ?= gcc
CXX     ?= g++
WARN    := -Wall -Wextra -pedantic -Werror
CFLAGS  ?= -std=c99 -O2 -march=native -fopenmp $(WARN)
SANFLAGS := -std=c99 -O1 -g -march=native -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer $(WARN)
LDLIBS  := -lm
BUILD   := build

TEST_SRCS := $(wildcard tests/test_*.c)
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
ASAN      := $(patsubst tests/%.c,$(BUILD)/asan/%,$(TEST_SRCS))
EXAMPLES  := $(BUILD)/hello

.PHONY: all test examples bench clean
all: examples

$(BUILD)/tests/%: tests/%.c metaformer.h tests/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/asan/%: tests/%.c metaformer.h tests/*.h
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/%: examples/%.c metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

examples: $(EXAMPLES)

# ASAN_OPTIONS: fail on the first report; OMP threads 2 so the sanitized run stays quick
test: $(TESTS) $(ASAN) $(EXAMPLES)
	@bash tests/run.sh "bash tests/hygiene.sh" \
	    $(foreach t,$(TESTS),"$(t)") \
	    $(foreach t,$(ASAN),"ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(t)")

bench:
	@echo "benchmarks arrive with the SGEMM kernel"

clean:
	rm -rf $(BUILD)
