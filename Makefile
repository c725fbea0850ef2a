# metaformer.h - build, test and benchmark
#   make test      header hygiene + every test, optimized and under ASan/UBSan (gcc's, and clang's
#                  for the tests that read files: build/casan/), the fuzz targets replayed on their
#                  seeds and crash inputs, examples/embed and, where nvcc is installed, the CUDA
#                  builds (the CI command). Builds and tests run in parallel on every core; the
#                  logs print whole, in a fixed order, and the closing line adds them up:
#                  "N passed, N failed"
#   make examples  build/hello ...
#   make demo      train the array sorter with the metric mixer (the README's first command)
#   make ablate    every mixer and memory model on the array sorter, quick: table + loss plot
#   make study     the NLP MetaFormer sorting study: the seed's model and figures, bench/results/study/
#                  (DATA=FILE [GPT2=DIR]: the seed's next-token study on a text, bench/results/study/text/)
#   make goldens   regenerate the PyTorch parity goldens (needs python3-torch)
#   make fuzz      the libFuzzer targets of tests/fuzz/ (clang), FUZZ_SECONDS each (default 120):
#                  corpus under build/fuzz/, results in bench/results/fuzz_<date>.md
#   make bench     SGEMM vs OpenBLAS and every model vs PyTorch 1.13 (Debian) and 2.x (PyPI, into
#                  build/venv-torch), torch.compile rows, the per-op breakdown (installs what it needs)
#   make bench-ops the per-op breakdown alone: C (mf_set_profile) next to torch.profiler
#   make bench-ab  A/B of the committed metaformer.h against the working tree's, interleaved runs
#                  (bash bench/ab.sh --help: other revisions, rows, repeats)
#   make test-cuda the CUDA parity suite built by nvcc for a real GPU (sm_90), and run
#   make train-cuda build/train-cuda: examples/train.c with the CUDA backend (--device cuda)
#   make train-mpi build/train-mpi: examples/train.c with data-parallel training over MPI (mpirun)
#   make train-mpi-cuda build/train-mpi-cuda: the same with --device cuda, gradients over NCCL
#   make bench-dist 2 ranks x 1 thread against 1 rank x 2 threads for every model (bench/dist.sh)
#   make bench-cuda every model and the attention / fast-weights kernels vs PyTorch on the GPU
#   make gpu-report on a machine with an NVIDIA GPU, in under 10 minutes: the build for its GPU,
#                  test-cuda, every model trained on the GPU (fp32, bf16) beside the CPU, the
#                  benchmarks at fp32 / TF32 / bf16 vs PyTorch; one Markdown report + the logs in
#                  GPU_REPORT_DIR (default bench/results/gpu_<date>/). bench/gpu_report.sh --dry-run
#                  prints what it would run
#   make reliability  bench/results/reliability_<date>.md: fuzzing, kill-during-save, resume of every
#                  model, non-finite and memory-cap tests, sanitizer runs
# The manuals (docs/): training, data, studies, cuda, distributed, benchmarks, reliability, library, math.
CC      ?= gcc
CXX     ?= g++
WARN    := -Wall -Wextra -pedantic -Werror
# HOST_ARCH: the CPU the host code is built for (make gpu-prep builds for a portable level instead)
HOST_ARCH ?= -march=native
CFLAGS  ?= -std=c99 -O2 $(HOST_ARCH) -fopenmp $(WARN)
# the sanitizer builds keep line tables only (-g1): a report names every frame's file and line, and
# the builds take a third less time than with full debug information (the emulated CUDA suites' 103
# s against 79 s on a 2-core AMD EPYC)
SANFLAGS := -std=c99 -O1 -g1 -march=native -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer $(WARN)
LDLIBS  := -lm
BUILD   := build
# build and test on every core (a make run by a recipe shares its parent's jobs)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

CXXFLAGS ?= -std=c++14 -O1 -Wall -Wextra -Werror
# Every program that runs kernels on the emulator (tests/cuda_emu.h) compiles them like nvcc does:
# nvcc contracts a*b+c into one FMA in device code by default, so the emulated kernels must round
# that way too (g++ -std=c++14 does not contract, and x86-64's baseline has no FMA instruction).
# The host code of those programs (the CPU reference) is contracted as well: one translation unit.
# gcc contracts in a pass that -O1 leaves out: -fexpensive-optimizations runs it.
EMU_FLAGS := -mfma -ffp-contract=fast -fexpensive-optimizations
# tests/test_dist.c and tests/test_dist_cuda.cpp need MPI: built by mpicc / mpicxx below and run on 2 ranks
TEST_SRCS := $(filter-out tests/test_dist.c,$(wildcard tests/test_*.c))
TEST_CXX  := $(filter-out tests/test_dist_cuda.cpp,$(wildcard tests/test_*.cpp))
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS)) $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TEST_CXX))
ASAN      := $(patsubst tests/%.c,$(BUILD)/asan/%,$(TEST_SRCS)) $(patsubst tests/%.cpp,$(BUILD)/asan/%,$(TEST_CXX))
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))
PYTHON    ?= /usr/bin/python3

.PHONY: all test examples fuzz bench bench-bf16 bench-ops bench-ab bench-cuda bench-dist gpu-report gpu-prep cuda-all demo ablate study study-classify goldens clean test-cuda train-cuda train-mpi train-mpi-cuda reliability FORCE
all: examples

# The implementation is compiled once per flavour (tests/mf_impl.c: optimized, ASan, CUDA emulator)
# and linked into every C test that uses the public API only; -DMETAFORMER_IMPLEMENTATION_DONE skips
# the copy the test includes. Tests that call the header's static internals (mf__*, MF__*) cannot
# link it: they are one program per flavour, tests/internal_suites.c, which compiles it once for
# all of them, but for INTERNAL_OWN, which configure the implementation themselves (test_crash's
# save hooks). The CUDA parity suites (tests/test_cuda*.cpp) are likewise one program per flavour,
# tests/cuda_suites.cpp.
FUZZ_TARGETS := $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c)))
INTERNAL   := $(shell grep -l -e 'mf__' -e 'MF__' $(TEST_SRCS))
SHARED_C   := $(basename $(notdir $(filter-out $(INTERNAL),$(TEST_SRCS))))
INTERNAL_OWN    := tests/test_crash.c
INTERNAL_SUITES := $(shell sed -n 's/^\#include "\(test_[a-z0-9_]*\.c\)"$$/tests\/\1/p' tests/internal_suites.c)
INTERNAL_SUITES_MISSING := $(filter-out $(INTERNAL_SUITES) $(INTERNAL_OWN),$(INTERNAL)) \
    $(filter-out $(shell sed -n 's/^ *{"\(test_[a-z0-9_]*\)", .*/tests\/\1.c/p' tests/internal_suites.c),$(INTERNAL_SUITES))
ifneq ($(strip $(INTERNAL_SUITES_MISSING)),)
$(error tests/internal_suites.c lacks $(INTERNAL_SUITES_MISSING): include each with its main renamed and add it to the table there)
endif
TESTS      := $(filter-out $(INTERNAL_SUITES:tests/%.c=$(BUILD)/tests/%),$(TESTS)) $(BUILD)/tests/internal_suites
ASAN       := $(filter-out $(INTERNAL_SUITES:tests/%.c=$(BUILD)/asan/%),$(ASAN)) $(BUILD)/asan/internal_suites
$(BUILD)/tests/internal_suites $(BUILD)/asan/internal_suites $(BUILD)/casan/internal_suites: $(INTERNAL_SUITES)
CUDA_DEPS  := metaformer.h metaformer_cuda.cuh tests/*.h examples/custom_mixer.c
# the CUDA parity suites (each in a namespace of its own in tests/cuda_suites.cpp; the emulator's own
# test, tests/test_cuda_emu.cpp, stays a program of its own)
CUDA_SUITE_SRCS := $(filter-out tests/test_cuda_emu.cpp,$(wildcard tests/test_cuda*.cpp))
TESTS      := $(filter-out $(CUDA_SUITE_SRCS:tests/%.cpp=$(BUILD)/tests/%),$(TESTS)) $(BUILD)/tests/cuda_suites
ASAN       := $(filter-out $(CUDA_SUITE_SRCS:tests/%.cpp=$(BUILD)/asan/%),$(ASAN)) $(BUILD)/asan/cuda_suites
$(BUILD)/tests/cuda_suites $(BUILD)/asan/cuda_suites: $(CUDA_SUITE_SRCS)
# a suite that program lacks would not run: every make stops until it is added
CUDA_SUITES_IN  := $(shell sed -n 's/^\#include "\(test_cuda[a-z0-9_]*\.cpp\)"$$/tests\/\1/p' tests/cuda_suites.cpp)
CUDA_SUITES_RUN := $(shell sed -n 's/^ *{"\(test_cuda[a-z0-9_]*\)", .*/tests\/\1.cpp/p' tests/cuda_suites.cpp)
CUDA_SUITES_MISSING := $(sort $(filter-out $(CUDA_SUITES_IN),$(CUDA_SUITE_SRCS)) $(filter-out $(CUDA_SUITES_RUN),$(CUDA_SUITE_SRCS)))
ifneq ($(CUDA_SUITES_MISSING),)
$(error tests/cuda_suites.cpp lacks $(CUDA_SUITES_MISSING): include each in a namespace of its own and add it to the suites table there)
endif
ASAN_CXX   := $(CXXFLAGS) -g1 -fsanitize=address,undefined -fno-sanitize-recover=all

$(BUILD)/obj/impl.o: tests/mf_impl.c metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -c $< -o $@
$(BUILD)/obj/impl_asan.o: tests/mf_impl.c metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -I. -c $< -o $@
$(BUILD)/obj/impl_emu.o: tests/mf_impl.c metaformer.h metaformer_cuda.cuh tests/cuda_emu.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_FLAGS) -DMF_IMPL_CUDA_EMU -Itests -x c++ -I. -c $< -o $@

# clang's ASan + UBSan (build/casan/): its UBSan also checks pointer arithmetic (pointer-overflow,
# arithmetic on NULL), which gcc's does not, and its ASan instruments differently. Where clang is
# missing the suite says so (tests/clang_missing.sh); `.ci/run` installs it on Debian/Ubuntu.
# (clang counts as installed when it links a sanitized program: Debian ships the runtime apart,
# libclang-rt-<version>-dev)
ifeq ($(origin CLANG),undefined)
CLANG    := $(shell c=$$(command -v clang 2>/dev/null) && echo 'int main(void) { return 0; }' | \
              $$c -fsanitize=address,undefined -x c - -o /dev/null 2>/dev/null && echo $$c)
endif
CLANGXX  ?= clang++
# the C tests that read outside data or do the most pointer arithmetic: every test linking the
# shared implementation (one clang compile of the header: io, data, loaders, errors, the model's
# training, classification and custom mixers, ...) and the fuzz replays (the tokenizers, BPE
# training, checkpoints, the command lines). The internal suites (ops, gemm, the tokenizer's and the
# model's internals, test_xl's memories, fast weights, feedback) and the emulated CUDA suites passed
# clang's build and are left to gcc's sanitizers: a clang build of the internal suites is a third
# whole compile of the implementation (45 s on a 2-core AMD EPYC), and with the CUDA suites' it does
# not fit make test's 10 minutes. `make build/casan/internal_suites` builds it (run it with the
# names of the suites to run).
CASAN_TESTS := $(SHARED_C)
$(BUILD)/obj/impl_casan.o: tests/mf_impl.c metaformer.h
	@mkdir -p $(dir $@)
	$(CLANG) $(SANFLAGS) -I. -c $< -o $@
$(SHARED_C:%=$(BUILD)/casan/%): $(BUILD)/casan/%: tests/%.c $(BUILD)/obj/impl_casan.o metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CLANG) $(SANFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -I. -Itests $< $(BUILD)/obj/impl_casan.o -o $@ $(LDLIBS)
$(BUILD)/casan/%: tests/%.c metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CLANG) $(SANFLAGS) -I. -Itests $< -o $@ $(LDLIBS)
$(BUILD)/casan/%: tests/%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(CLANGXX) $(ASAN_CXX) $(EMU_FLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(SHARED_C:%=$(BUILD)/tests/%): $(BUILD)/tests/%: tests/%.c $(BUILD)/obj/impl.o metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -I. -Itests $< $(BUILD)/obj/impl.o -o $@ $(LDLIBS)
$(SHARED_C:%=$(BUILD)/asan/%): $(BUILD)/asan/%: tests/%.c $(BUILD)/obj/impl_asan.o metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -I. -Itests $< $(BUILD)/obj/impl_asan.o -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/asan/%: tests/%.c metaformer.h tests/*.h examples/common.h examples/custom_mixer.c
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -I. -Itests $< -o $@ $(LDLIBS)

# the portable (no SIMD) GEMM kernel, checked like the vector ones
$(BUILD)/nosimd/test_gemm: tests/test_gemm.c metaformer.h tests/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_NO_SIMD -I. -Itests $< -o $@ $(LDLIBS)

# examples/train.c on the emulated CUDA device: train.c compiled by cc without its own copy of the
# implementation (see examples/metaformer_cuda.cu), linked with the emulator's (tests/mf_impl.c)
$(BUILD)/emu/train_emu: examples/train.c examples/common.h metaformer.h $(BUILD)/obj/impl_emu.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -c $< -o $(BUILD)/emu/train.o
	$(CXX) $(BUILD)/emu/train.o $(BUILD)/obj/impl_emu.o -o $@ -lm -fopenmp

# C++ tests: the CUDA emulator (tests/cuda_emu.h) runs the .cuh kernels on the CPU
$(BUILD)/tests/%: tests/%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_FLAGS) -I. -Itests $< -o $@ $(LDLIBS)

$(BUILD)/asan/%: tests/%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(CXX) $(ASAN_CXX) $(EMU_FLAGS) -I. -Itests $< -o $@ $(LDLIBS)

# Each example is a one-file program (cc -O2 -fopenmp examples/hello.c -o hello -lm builds it); here
# they link the implementation compiled once (build/obj/impl.o, with the same CFLAGS), and
# -DMETAFORMER_IMPLEMENTATION_DONE skips the copy each one includes: one full compile of the header
# instead of one per example
$(BUILD)/%: examples/%.c examples/common.h examples/svg.h metaformer.h $(BUILD)/obj/impl.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE $< $(BUILD)/obj/impl.o -o $@ $(LDLIBS)

examples: $(EXAMPLES)

# The example programs with examples/custom_mixer.c's mixer linked in (how a program gets mixers of
# your own: -DEXTRA_MIXERS=<your registration function> and your file, docs/library.md)
$(BUILD)/%-custom: examples/%.c examples/custom_mixer.c examples/common.h examples/svg.h metaformer.h $(BUILD)/obj/impl.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -DEXTRA_MIXERS=custom_mixer_register -DCUSTOM_MIXER_NO_MAIN \
	    $< examples/custom_mixer.c $(BUILD)/obj/impl.o -o $@ $(LDLIBS)

$(BUILD)/bench_model-custom: bench/bench_model.c examples/custom_mixer.c metaformer.h $(BUILD)/obj/impl.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -DMETAFORMER_IMPLEMENTATION_DONE -DEXTRA_MIXERS=custom_mixer_register -DCUSTOM_MIXER_NO_MAIN \
	    bench/bench_model.c examples/custom_mixer.c $(BUILD)/obj/impl.o -o $@ $(LDLIBS)

# examples/embed built by its own Makefile, as a user builds it (with this Makefile's warnings)
$(BUILD)/embed/embed: examples/embed/main.c examples/embed/Makefile metaformer.h
	@mkdir -p $(dir $@)
	$(MAKE) -C examples/embed OUT=$(abspath $(dir $@)) CC=$(CC) CFLAGS="$(CFLAGS)"

# ---- make test ----
# Every test command is a target of its own, a log under build/logs/, so make -j runs the tests in
# parallel with each other and with the builds still queued. tests/run.sh --one runs a command and
# keeps its output (a failing test does not stop the others), then tests/run.sh --report prints the
# logs whole, in the fixed order of TEST_LOGS, and the closing line "N passed, N failed".
# ASAN_OPTIONS: stop at the first report, and report leaks.
ASAN_ENV  := ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
# clang's sanitizer builds: every C test and the emulated CUDA suites (see CASAN_TESTS)
CASAN := $(if $(CLANG),$(patsubst %,$(BUILD)/casan/%,$(CASAN_TESTS)))
SCRIPTS   := $(if $(CLANG),,clang_missing) hygiene cuda_build test_cli test_data_cli train_emu test_ablate test_presets test_embed test_tokenize test_nonfinite test_resume test_accum test_study test_study_text test_classify_cli test_classify_text test_dist test_gpu_report test_gpu_first_run test_train_mpi test_readme test_links test_custom_cli test_valid_protocol
TEST_LOGS := $(SCRIPTS:%=$(BUILD)/logs/sh/%.log) $(TESTS:$(BUILD)/%=$(BUILD)/logs/%.log) \
             $(BUILD)/logs/nosimd/test_gemm.log $(ASAN:$(BUILD)/%=$(BUILD)/logs/%.log) \
             $(CASAN:$(BUILD)/%=$(BUILD)/logs/%.log) $(FUZZ_TARGETS:%=$(BUILD)/logs/fuzz/%.log)
# the order make takes them up in (make -j queues every job it finds ready in this order, and a
# test once its binary is built): the longest builds and runs first, so that the last jobs to finish
# are short - the nvcc builds, the emulated CUDA suites under ASan (the slowest compiles), then the
# slowest runs
TEST_LONG  := sh/cuda_build asan/cuda_suites tests/cuda_suites asan/internal_suites sh/hygiene sh/train_emu \
              tests/internal_suites
TEST_SCHED := $(foreach t,$(TEST_LONG),$(filter $(BUILD)/logs/$(t).log,$(TEST_LOGS))) \
              $(filter $(BUILD)/logs/asan/%,$(TEST_LOGS)) $(TEST_LOGS)

test: $(TEST_SCHED) $(EXAMPLES)
	@bash tests/run.sh --report $(TEST_LOGS)
# the test binaries stay after the run (made by pattern rules for the logs only, make would delete them)
.SECONDARY: $(TESTS) $(ASAN) $(CASAN) $(BUILD)/nosimd/test_gemm $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay/%)

$(BUILD)/logs/sh/%.log: tests/%.sh FORCE
	@bash tests/run.sh --one $@ "bash $<"
$(BUILD)/logs/sh/test_cli.log: $(BUILD)/train $(BUILD)/ablate
$(BUILD)/logs/sh/test_data_cli.log: $(BUILD)/train $(BUILD)/sample
$(BUILD)/logs/sh/test_presets.log: $(BUILD)/train $(BUILD)/ablate
$(BUILD)/logs/sh/test_valid_protocol.log: $(BUILD)/train
$(BUILD)/logs/sh/test_nonfinite.log: $(BUILD)/train
$(BUILD)/logs/sh/test_accum.log: $(BUILD)/train
$(BUILD)/logs/sh/test_ablate.log: $(BUILD)/ablate
$(BUILD)/logs/sh/train_emu.log: $(BUILD)/emu/train_emu
$(BUILD)/logs/sh/test_resume.log: $(BUILD)/train-custom $(BUILD)/emu/train_emu
$(BUILD)/logs/sh/test_custom_cli.log: $(BUILD)/custom_mixer $(BUILD)/train $(BUILD)/train-custom $(BUILD)/sample $(BUILD)/sample-custom $(BUILD)/ablate-custom $(BUILD)/bench_model-custom
$(BUILD)/logs/sh/test_train_mpi.log: $(BUILD)/train $(BUILD)/train-mpi
$(BUILD)/logs/sh/test_embed.log: $(BUILD)/embed/embed
$(BUILD)/logs/sh/test_tokenize.log: $(BUILD)/tokenize
$(BUILD)/logs/sh/test_study.log: $(BUILD)/study $(BUILD)/sort
$(BUILD)/logs/sh/test_study_text.log: $(BUILD)/study_text
$(BUILD)/logs/sh/test_classify_cli.log: $(BUILD)/classify
$(BUILD)/logs/sh/test_classify_text.log: $(BUILD)/classify $(BUILD)/tokenize
$(BUILD)/logs/sh/test_gpu_report.log: $(BUILD)/train
$(BUILD)/logs/sh/test_gpu_first_run.log: $(BUILD)/train
$(BUILD)/logs/sh/test_readme.log: $(EXAMPLES)
$(BUILD)/logs/sh/test_dist.log: $(BUILD)/dist/test_dist $(BUILD)/dist/asan/test_dist $(BUILD)/dist/test_dist_cuda

# ---- MPI: data-parallel training ([mf:dist], -DMETAFORMER_MPI) ----
# tools/install_mpi.sh installs Open MPI where mpicc is missing and apt-get can; where it cannot, the
# binaries are not made and tests/test_dist.sh says "skip".
MPICC ?= mpicc
MPICXX ?= mpicxx
# $(call MPI_BUILD,compiler,flags): with the MPI wrapper compiler when there is one, else no binary
MPI_BUILD = bash tools/install_mpi.sh; if command -v $(1) > /dev/null; then \
            echo "$(1) -DMETAFORMER_MPI $(2) -Itests -I. $< -o $@ $(LDLIBS)"; \
            $(1) -DMETAFORMER_MPI $(2) -Itests -I. $< -o $@ $(LDLIBS); else rm -f $@; fi
$(BUILD)/dist/test_dist: tests/test_dist.c metaformer.h tests/mf_test.h
	@mkdir -p $(dir $@)
	@$(call MPI_BUILD,$(MPICC),$(CFLAGS))
$(BUILD)/dist/asan/test_dist: tests/test_dist.c metaformer.h tests/mf_test.h | $(BUILD)/dist/test_dist
	@mkdir -p $(dir $@)
	@$(call MPI_BUILD,$(MPICC),$(SANFLAGS))
# the NCCL transport on the emulated GPU (tests/nccl_emu.h: NCCL's API over MPI)
$(BUILD)/dist/test_dist_cuda: tests/test_dist_cuda.cpp $(CUDA_DEPS) tests/nccl_emu.h | $(BUILD)/dist/asan/test_dist
	@mkdir -p $(dir $@)
	@$(call MPI_BUILD,$(MPICXX),-DMETAFORMER_NCCL $(CXXFLAGS) $(EMU_FLAGS))
# its ASan + UBSan build (40 s of compiling) is left out of make test; tests/test_dist.sh runs it when built
$(BUILD)/dist/asan/test_dist_cuda: tests/test_dist_cuda.cpp $(CUDA_DEPS) tests/nccl_emu.h | $(BUILD)/dist/test_dist_cuda
	@mkdir -p $(dir $@)
	@$(call MPI_BUILD,$(MPICXX),-DMETAFORMER_NCCL $(ASAN_CXX) $(EMU_FLAGS))
$(BUILD)/logs/tests/%.log: $(BUILD)/tests/% FORCE
	@bash tests/run.sh --one $@ "$<"
$(BUILD)/logs/nosimd/%.log: $(BUILD)/nosimd/% FORCE
	@bash tests/run.sh --one $@ "$<"
# a test's ASan run starts after its optimized run: some tests write fixed files under build/
$(BUILD)/logs/asan/%.log: $(BUILD)/asan/% FORCE | $(BUILD)/logs/tests/%.log
	@bash tests/run.sh --one $@ "$(ASAN_ENV) $<"
$(BUILD)/logs/casan/%.log: $(BUILD)/casan/% FORCE | $(BUILD)/logs/asan/%.log
	@bash tests/run.sh --one $@ "$(ASAN_ENV) $<$(CASAN_ARGS_$*:%= %)"
# The CUDA suites, the longest run of each build, compile their program in the same job as the run:
# make -j takes a test's run up only when its pass over the list comes back to it, so a run whose
# program another job finished mid-pass waited for the pass to end (minutes, at the end of make
# test). Their files under build/ are per process (scratch_path), so the two builds run side by side.
$(BUILD)/logs/tests/cuda_suites.log $(BUILD)/logs/asan/cuda_suites.log: $(BUILD)/logs/%/cuda_suites.log: \
        tests/cuda_suites.cpp $(CUDA_SUITE_SRCS) $(CUDA_DEPS) FORCE
	@$(MAKE) -s --no-print-directory $(BUILD)/$*/cuda_suites
	@bash tests/run.sh --one $@ "$(if $(filter asan,$*),$(ASAN_ENV) )$(BUILD)/$*/cuda_suites"
FORCE:

# ---- fuzzing (tests/fuzz/) ----
# Each tests/fuzz/fuzz_*.c is a libFuzzer target: `make fuzz` builds them with clang (fuzzer +
# ASan + UBSan) and tests/fuzz/run.sh runs each. `make test` replays the committed seeds and crash
# inputs (tests/fuzz/seeds/, tests/fuzz/regress/) through the same targets linked with
# tests/fuzz/replay.c and built with ASan + UBSan without libFuzzer (so gcc will do).
FUZZ_DEPS    := tests/fuzz/fuzz.h tests/fuzz/fuzz_cli.h metaformer.h examples/*.c examples/*.h tests/golden.h tests/mf_test.h
SAN_ONLY     := -fsanitize=address,undefined
FUZZFLAGS    := $(filter-out $(SAN_ONLY),$(SANFLAGS)) -fsanitize=fuzzer,address,undefined -Wno-unused-function
# the library is compiled once per flavour and linked into every target (as the tests link tests/mf_impl.c)
$(BUILD)/obj/impl_fuzz.o: tests/mf_impl.c metaformer.h
	@mkdir -p $(dir $@)
	$(CLANG) $(filter-out $(SAN_ONLY),$(SANFLAGS)) -fsanitize=fuzzer-no-link,address,undefined -I. -c $< -o $@
$(BUILD)/fuzz/bin/%: tests/fuzz/%.c $(BUILD)/obj/impl_fuzz.o $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZFLAGS) -DMETAFORMER_IMPLEMENTATION_DONE -I. -Itests $< $(BUILD)/obj/impl_fuzz.o -o $@ $(LDLIBS)
# the replay: clang's sanitizers where clang is installed (they catch more: the pointer arithmetic of
# tests/fuzz/regress/fuzz_golden passes gcc's), else gcc's
REPLAY_CC   := $(or $(CLANG),$(CC))
REPLAY_IMPL := $(BUILD)/obj/$(if $(CLANG),impl_casan.o,impl_asan.o)
$(BUILD)/fuzz/replay/%: tests/fuzz/%.c tests/fuzz/replay.c $(REPLAY_IMPL) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(REPLAY_CC) $(SANFLAGS) -Wno-unused-function -DMETAFORMER_IMPLEMENTATION_DONE -I. -Itests $< tests/fuzz/replay.c \
		$(REPLAY_IMPL) -o $@ $(LDLIBS)
# an allocation above 2 GB fails the replay, as libFuzzer's -rss_limit_mb does the fuzzing
$(BUILD)/logs/fuzz/%.log: $(BUILD)/fuzz/replay/% FORCE
	@bash tests/run.sh --one $@ "$(subst detect_leaks=1,detect_leaks=1:max_allocation_size_mb=2048,$(ASAN_ENV)) $< tests/fuzz/seeds/$* tests/fuzz/regress/$* $(FUZZ_EXTRA_$*)"
# the safetensors targets also read the committed goldens (made by make goldens)
FUZZ_EXTRA_fuzz_golden := tests/goldens
FUZZ_EXTRA_fuzz_ckpt   := tests/goldens
fuzz-build: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/bin/%) $(BUILD)/train $(BUILD)/tokenize
FUZZ_SECONDS ?= 120
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh

# ---- CUDA (nvcc; CI has nvcc but no GPU: `make test` checks the kernels on the emulator and
# tests/cuda_build.sh compiles these targets' sources with nvcc) ----
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# one definition of the GPU builds' flags: make cuda-all, gpu-report, gpu-prep and tests/cuda_build.sh
# (make test) all build with these (host warnings are errors, as CFLAGS makes them for C)
NVWARN    := -Xcompiler -Wall,-Wextra -Werror all-warnings
NVFLAGS   ?= -std=c++14 -O2 $(CUDA_ARCH) -Xcompiler -fopenmp $(NVWARN)
NVLIBS    := -lcublas -lgomp
CUDA_INC  ?= $(dir $(NVCC))../include

# every CUDA parity suite built by nvcc (build/cuda/cuda_suites) and run on the real GPU (no
# emulator), each suite in a process of its own (a crash ends that suite only)
CUDA_SUITES := $(BUILD)/cuda/cuda_suites
test-cuda: $(CUDA_SUITES)
	@bash tests/run.sh $(foreach t,$(CUDA_SUITE_SRCS:tests/%.cpp=%),"$(BUILD)/cuda/cuda_suites $(t)")

$(BUILD)/cuda/cuda_suites: tests/cuda_suites.cpp $(CUDA_SUITE_SRCS) $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) -x cu $(NVFLAGS) -I. -Itests $< -o $@ $(NVLIBS)
# the same with MF_CUDA_DEBUG (a synchronisation after every launch, GEMM and copy: a fault names its
# op, kernel, launch and shapes) and -lineinfo (compute-sanitizer's reports name source lines)
$(BUILD)/cuda-debug/cuda_suites: tests/cuda_suites.cpp $(CUDA_SUITE_SRCS) $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) -x cu $(NVFLAGS) -DMF_CUDA_DEBUG -lineinfo -I. -Itests $< -o $@ $(NVLIBS)
# one suite alone: make build/cuda/test_cuda_ops
$(BUILD)/cuda/test_%: tests/test_%.cpp metaformer.h metaformer_cuda.cuh tests/*.h
	@mkdir -p $(dir $@)
	$(NVCC) -x cu $(NVFLAGS) -I. -Itests $< -o $@ $(NVLIBS)

# the GPU benchmarks (bench/run_cuda.sh): the model step, the fast-weights kernels (recurrent vs
# chunkwise), the attention kernel (bench/torch_sdpa.py times PyTorch's SDPA at the same shapes);
# each runs with --device cuda. Each is C, compiled by cc against the CUDA runtime's headers and
# linked with the implementation train-cuda links (as train.c is)
$(BUILD)/cuda/bench_%: bench/bench_%.c metaformer.h $(BUILD)/cuda/metaformer_cuda.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMETAFORMER_CUDA -DMETAFORMER_IMPLEMENTATION_DONE -I. -isystem $(CUDA_INC) -c $< -o $@.o
	$(NVCC) $(NVFLAGS) $@.o $(BUILD)/cuda/metaformer_cuda.o -o $@ $(NVLIBS)

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

# build/train-mpi: examples/train.c with data-parallel training over MPI (-DMETAFORMER_MPI), built
# by Open MPI's mpicc (MPI_BUILD: installed when missing); run it with mpirun (docs/distributed.md: "Training on
# several processes")
train-mpi: $(BUILD)/train-mpi
$(BUILD)/train-mpi: examples/train.c examples/common.h metaformer.h
	@mkdir -p $(dir $@)
	@$(call MPI_BUILD,$(MPICC),$(CFLAGS))

# build/train-mpi-cuda: train-mpi with --device cuda, one GPU per rank (its local rank's), gradients
# averaged over NCCL (METAFORMER_NCCL beside METAFORMER_CUDA); the implementation compiled by nvcc with
# mpi.h's include path from mpicc, train.c by mpicc without it (as train-cuda)
MPI_NVLINK = $(shell $(MPICC) --showme:link 2>/dev/null | sed 's/-Wl,[^ ]*//g')
train-mpi-cuda: $(BUILD)/train-mpi-cuda
$(BUILD)/cuda/metaformer_cuda_nccl.o: examples/metaformer_cuda.cu metaformer.h metaformer_cuda.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DMETAFORMER_MPI -DMETAFORMER_NCCL $(shell $(MPICC) --showme:compile 2>/dev/null) -c $< -o $@
$(BUILD)/train-mpi-cuda: examples/train.c examples/common.h $(BUILD)/cuda/metaformer_cuda_nccl.o
	@mkdir -p $(BUILD)/cuda
	$(MPICC) $(CFLAGS) -DMETAFORMER_MPI -DMETAFORMER_IMPLEMENTATION_DONE -c $< -o $(BUILD)/cuda/train_mpi.o
	$(NVCC) $(BUILD)/cuda/train_mpi.o $(BUILD)/cuda/metaformer_cuda_nccl.o -o $@ $(NVLIBS) -lnccl $(MPI_NVLINK)

# the README's first command: the array sorter with the metric-tensor mixer, no data needed
demo: $(BUILD)/sort
	./$(BUILD)/sort --mixer metric

# every mixer and memory model on the array sorter with the same budget (a few minutes
# on 2 cores): a table, build/ablate_sorter.csv / .md / .svg (+ .png with gnuplot).
# On a text file: ./build/ablate FILE --quick
ablate: $(BUILD)/ablate
	./$(BUILD)/ablate --quick --out $(BUILD)/ablate_sorter

# the NLP MetaFormer seed's sorting study (sdpa, metric, quadratic on the seed's model and a relabeled
# control, 5 seeds, one per core at once): bench/results/study/report.md and its SVG figures (+ PNG
# with gnuplot). With DATA=FILE: the seed's next-token study instead (examples/study_text.c): sdpa,
# metric, quadratic, pool and identity on the same tokens of FILE (GPT-2 BPE with GPT2=DIR,
# encoder.json + vocab.bpe; else characters), 3 seeds: bench/results/study/text/report.md, loss
# curves, metric heads, samples. STUDY_ARGS adds options (./build/study_text --help).
study: $(if $(DATA),$(BUILD)/study_text,$(BUILD)/study)
	$(if $(DATA),./$(BUILD)/study_text --data '$(DATA)' $(if $(GPT2),--gpt2 '$(GPT2)') --out bench/results/study/text$(if $(GPT2),/gpt2) $(STUDY_ARGS),./$(BUILD)/study --out bench/results/study)

# the NLP MetaFormer seed's classification ablation (one block; sdpa, metric in the seed's S S^T
# form, quadratic, pool, identity; 5 seeds) on real text: with no CORPUS, language identification
# from Debian's word lists (bench/langid_corpus.sh installs them with apt-get, or fails saying so;
# 3 minutes on 2 cores):
# bench/results/study/classify.md. CORPUS=FILE: your LABEL<TAB>TEXT file (e.g. IMDb), character
# tokens or TOKENIZER=FILE (build/tokenize's), into bench/results/study/classify_<name>.md;
# CLS_OPTS: more build/classify options (later ones win, e.g. CLS_OPTS="--seq-len 512 --steps 6000")
CLS_MIXERS := sdpa,metric,quadratic,pool,identity
CLS_REPORT  = bench/results/study/classify$(if $(CORPUS),_$(notdir $(basename $(CORPUS)))).md
study-classify: $(BUILD)/classify
	@mkdir -p bench/results/study
	$(if $(CORPUS),,bash bench/langid_corpus.sh $(BUILD)/langid.tsv 1000 3 1 2> $(BUILD)/langid.log || { cat $(BUILD)/langid.log; exit 1; }; cat $(BUILD)/langid.log)
	start=$$(date +%s); nice ./$(BUILD)/classify $(or $(CORPUS),$(BUILD)/langid.tsv) \
	    $(if $(TOKENIZER),--tokenizer $(TOKENIZER),--tokens chars) --seq-len $(if $(CORPUS),256,64) --steps 3000 \
	    --eval-every 1000 --seeds 5 --mixers $(CLS_MIXERS) --metric-form softmax_tril $(CLS_OPTS) --report $(CLS_REPORT) && \
	{ printf '\nRun by `make study-classify%s` on %s (%s cores, lscpu), %s: %s s of wall time.\n' \
	    "$(if $(CORPUS), CORPUS=$(CORPUS))$(if $(TOKENIZER), TOKENIZER=$(TOKENIZER))$(if $(CLS_OPTS), CLS_OPTS=\"$(CLS_OPTS)\")" \
	    "$$(lscpu | sed -n 's/^Model name: *//p')" "$$(nproc)" "$$(date -u +%F)" "$$(( $$(date +%s) - start ))"; \
	  $(if $(CORPUS),,printf '\nThe corpus: `bash bench/langid_corpus.sh $(BUILD)/langid.tsv 1000 3 1`, from the word lists\n\n'; \
	    sed -n 's/^\(w[a-z]*\) \([^ ]*\) \/usr\/share\/dict\/.*/* \1 \2/p' $(BUILD)/langid.log; printf '\n'; \
	    sed -n '/words of its own/s/^/* /p' $(BUILD)/langid.log;) } >> $(CLS_REPORT)
	@echo "wrote $(CLS_REPORT)"

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

# the CPU's bf16 products (mf_bgemm on each bf16 kernel this CPU has) against its fp32 engine, then
# torch.mm in fp32 and bf16 at the same shapes (PyTorch 2.x in the venv of bench/torch2_venv.sh)
bench-bf16: $(BUILD)/bench_bf16
	./$(BUILD)/bench_bf16
	"$$(bash bench/torch2_venv.sh | tail -n 1)" bench/torch_mm.py
$(BUILD)/bench_bf16: bench/bench_bf16.c metaformer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# only the per-op time breakdown of a training step of every model: C (mf_set_profile) next to
# PyTorch 2.x's torch.profiler, grouped the same way (bench/results/cpu_<date>_ops.md)
bench-ops:
	bash bench/run.sh --ops-only

# a change's speed: the committed header (A) against the working tree's (B), interleaved in one run
bench-ab:
	bash bench/ab.sh

# the reliability report: runs the reliability tests it finds by name, reads fuzzing results and make
# test's sanitizer logs (bench/reliability.sh --logs reads every part from the logs)
reliability:
	bash bench/reliability.sh

# data-parallel training on this machine: 2 ranks x 1 thread (build/train-mpi) against 1 process x 2
# threads for every model; bench/results/dist_<date>.md
bench-dist:
	bash bench/dist.sh

# the same on an NVIDIA GPU against PyTorch on that GPU (needs nvcc, a GPU and torch 2.x with CUDA)
bench-cuda:
	bash bench/run_cuda.sh

# every nvcc build (the parity suites, train-cuda, the GPU benchmarks) and the CPU trainer beside
# them: what make gpu-report builds first, in parallel
cuda-all: $(CUDA_SUITES) $(BUILD)/train-cuda $(BUILD)/train $(BUILD)/cuda/bench_model $(BUILD)/cuda/bench_attention \
          $(BUILD)/cuda/bench_fw_sweep $(BUILD)/cuda/bench_reduce

# the prepared first run: every GPU binary built here (no GPU needed) into GPU_PREP, host code for a
# portable x86-64 level, with its file list and commit (bench/gpu_prep.sh); on the GPU machine
# bench/gpu_first_run.sh DIR runs them without compiling anything
GPU_PREP      ?= $(BUILD)/gpu-prep
GPU_PREP_OBJ  ?= $(BUILD)/gpu-prep.obj
GPU_PREP_HOST ?= -march=x86-64-v3
GPU_PREP_BINS := train train-cuda cuda/cuda_suites cuda-debug/cuda_suites cuda/bench_model cuda/bench_attention \
                 cuda/bench_fw_sweep cuda/bench_reduce train-mpi-cuda?
gpu-prep:
	@bash bench/gpu_prep.sh "$(GPU_PREP)" "$(GPU_PREP_OBJ)" "$(GPU_PREP_HOST)" $(GPU_PREP_BINS)

# the whole CUDA backend on a real GPU, one report (bench/gpu_report.sh)
GPU_REPORT_DIR ?=
gpu-report:
	bash bench/gpu_report.sh $(if $(GPU_REPORT_DIR),--out "$(GPU_REPORT_DIR)")

# make -s print-VAR: a variable's value (tests/cuda_build.sh reads CUDA_SUITES)
print-%:
	@echo $($*)

clean:
	rm -rf $(BUILD)
