# metaformer.h - build, test and benchmark
#   make test      header hygiene + every test, optimized and under ASan/UBSan (the CI command)
#   make examples  build/hello ...
#   make demo      train the array sorter with the metric mixer (the README's first command)
#   make ablate    every mixer and memory model on the array sorter, quick: table + loss plot (issue #9)
#   make goldens   regenerate the PyTorch parity goldens (needs python3-torch)
#   make bench     SGEMM vs OpenBLAS and every model vs PyTorch (installs what it needs)
#   make test-cuda the CUDA parity suite built by nvcc for a real GPU (sm_90), and run
#   make train-cuda build/train-cuda: examples/train.c with the CUDA backend (--device cuda)
#   make bench-cuda every model and the attention / fast-weights kernels vs PyTorch on the GPU
CC      ?= gcc
CXX     ?= g++
WARN    := -Wall -Wextra -pedantic -Werror
CFLAGS  ?= -std=c99 -O2 -march=native -fopenmp $(WARN)
SANFLAGS := -std=c99 -O1 -g -march=native -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer $(WARN)
LDLIBS  := -lm
BUILD   := build
# the tests compile the header some 40 times: build on every core (the test run itself stays serial)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)

CXXFLAGS ?= -std=c++14 -O1 -Wall -Wextra -Werror
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_CXX  := $(wildcard tests/test_*.cpp)
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS)) $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TEST_CXX))
ASAN      := $(patsubst tests/%.c,$(BUILD)/asan/%,$(TEST_SRCS)) $(patsubst tests/%.cpp,$(BUILD)/asan/%,$(TEST_CXX))
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))
PYTHON    ?= /usr/bin/python3

.PHONY: all test examples bench bench-cuda demo ablate goldens clean test-cuda train-cuda
all: examples

$(BUILD)/tests/%: tests/%.c metaformer.h tests/*.h examples/common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/asan/%: tests/%.c metaformer.h tests/*.h examples/common.h
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

# the portable (no SIMD) GEMM kernel, checked like the vector ones
$(BUILD)/nosimd/test_gemm: tests/test_gemm.c metaformer.h tests/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_NO_SIMD -I. -Itests $< -o $@ $(LDLIBS)

# examples/train.c on the emulated CUDA device: the implementation with the backend compiled by
# g++ over tests/cuda_emu.h, train.c by cc without its own copy (see examples/metaformer_cuda.cu)
$(BUILD)/emu/train_emu: examples/train.c examples/common.h metaformer.h metaformer_cuda.cuh tests/cuda_emu.h
	@mkdir -p $(dir $@)
	printf '#include "cuda_emu.h"\n#define METAFORMER_IMPLEMENTATION\n#define METAFORMER_CUDA\n#include "metaformer.h"\n' > $(BUILD)/emu/impl.cpp
	$(CXX) -std=c++14 -O2 -I. -Itests -c $(BUILD)/emu/impl.cpp -o $(BUILD)/emu/impl.o
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -c $< -o $(BUILD)/emu/train.o
	$(CXX) $(BUILD)/emu/train.o $(BUILD)/emu/impl.o -o $@ -lm -fopenmp

# C++ tests: the CUDA emulator (tests/cuda_emu.h) runs the .cuh kernels on the CPU
$(BUILD)/tests/%: tests/%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/asan/%: tests/%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -g -fsanitize=address,undefined -fno-sanitize-recover=all -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/%: examples/%.c examples/common.h metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

examples: $(EXAMPLES)

# ASAN_OPTIONS: fail on the first report; OMP threads 2 so the sanitized run stays quick
test: $(TESTS) $(ASAN) $(EXAMPLES) $(BUILD)/nosimd/test_gemm $(BUILD)/emu/train_emu
	@bash tests/run.sh "bash tests/hygiene.sh" "bash tests/cuda_build.sh" "bash tests/test_cli.sh" "bash tests/train_emu.sh" \
	    "bash tests/test_ablate.sh" \
	    $(foreach t,$(TESTS),"$(t)") "$(BUILD)/nosimd/test_gemm" \
	    $(foreach t,$(ASAN),"ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(t)")

# ---- CUDA (nvcc; CI has nvcc but no GPU: `make test` checks the kernels on the emulator and
# tests/cuda_build.sh compiles these targets' sources with nvcc) ----
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVFLAGS   ?= -std=c++14 -O2 $(CUDA_ARCH) -Xcompiler -fopenmp
NVLIBS    := -lcublas -lgomp

# every CUDA parity suite (tests/test_cuda*.cpp) built by nvcc and run on the real GPU (no emulator)
CUDA_SUITES := $(patsubst tests/%.cpp,$(BUILD)/cuda/%,$(filter-out tests/test_cuda_emu.cpp,$(wildcard tests/test_cuda*.cpp)))
test-cuda: $(CUDA_SUITES)
	@bash tests/run.sh $(foreach t,$(CUDA_SUITES),"$(t)")

$(BUILD)/cuda/test_%: tests/test_%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(NVCC) -x cu $(NVFLAGS) -I. -Itests $< -o $@ $(NVLIBS)

# the GPU benchmarks (bench/run_cuda.sh): the model step, the fast-weights kernels (recurrent vs
# chunkwise), the attention kernel (bench/torch_sdpa.py times PyTorch's SDPA at the same shapes);
# each runs with --device cuda
$(BUILD)/cuda/bench_%: bench/bench_%.c metaformer.h metaformer_cuda.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -x cu $(NVFLAGS) -DMETAFORMER_CUDA -I. $< -o $@ $(NVLIBS)

# train.c stays C: the implementation (with the kernels) comes from examples/metaformer_cuda.cu;
# -DMETAFORMER_IMPLEMENTATION_DONE skips the implementation that train.c itself includes
train-cuda: $(BUILD)/train-cuda

$(BUILD)/cuda/metaformer_cuda.o: examples/metaformer_cuda.cu metaformer.h metaformer_cuda.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/train-cuda: examples/train.c examples/common.h $(BUILD)/cuda/metaformer_cuda.o
	@mkdir -p $(BUILD)/cuda
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -c $< -o $(BUILD)/cuda/train.o
	$(NVCC) $(BUILD)/cuda/train.o $(BUILD)/cuda/metaformer_cuda.o -o $@ $(NVLIBS)

# the README's first command: the array sorter with the metric-tensor mixer, no data needed
demo: $(BUILD)/sort
	./$(BUILD)/sort --mixer metric

# issue #9: every mixer and memory model on the array sorter with the same budget (a few minutes
# on 2 cores): a table, build/ablate_sorter.csv / .md / .svg (+ .png with gnuplot).
# On a text file: ./build/ablate FILE --quick
ablate: $(BUILD)/ablate
	./$(BUILD)/ablate --quick --out $(BUILD)/ablate_sorter

# PyTorch parity goldens (needs python3-torch; the committed goldens make `make test` Python-free)
goldens: $(BUILD)/parity_export
	$(PYTHON) tests/parity/make_goldens.py
	for f in tests/parity/goldens_*.py; do [ ! -e "$$f" ] || $(PYTHON) "$$f" || exit 1; done

$(BUILD)/parity_export: tests/parity/export.c metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# benchmarks: SGEMM vs OpenBLAS, model training vs PyTorch, side by side in one run
bench:
	bash bench/run.sh

# the same on an NVIDIA GPU against PyTorch on that GPU (needs nvcc, a GPU and torch 2.x with CUDA)
bench-cuda:
	bash bench/run_cuda.sh

clean:
	rm -rf $(BUILD)
