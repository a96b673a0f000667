# lynn - plain GNU make. `make help-targets` lists the targets.
#
#   make            build liblynn.a and ./lynn
#   make test       install what is missing, build, run the Check suites
#   make demo       install what is missing, build, run the main job on the tiny model
#   make asan       the test suite under AddressSanitizer + UBSan
#   make fuzz       libFuzzer targets under tests/fuzz (FUZZ_TIME seconds each)
#   make bench      benchmarks (figures go to docs/benchmarks.md by hand)
#   make clean
#
# CUDA ?= auto: kernels/*.cu are built (sm_90, plus the sm_100a/sm_120a FP4
# path) when nvcc is on PATH or in /usr/local/cuda; CUDA=0 forces the CPU build.

BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CUDA    ?= auto
FUZZ_TIME ?= 20

PKGS    := libcjson libcurl libzstd openssl libmicrohttpd libpcre2-8 libutf8proc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

WARN    := -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter
CFLAGS  := -std=c11 $(WARN) $(OPT) -g -D_GNU_SOURCE -Iinclude -Isrc -I$(BUILD) \
           -MMD -MP -pthread $(PKG_CFLAGS) $(SAN) $(EXTRA_CFLAGS)
LDLIBS  := $(PKG_LIBS) -lm -pthread

# ---- CUDA detection ----
NVCC := $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
CU_SRC := $(wildcard kernels/*.cu)
# CUDA_HOME: the first toolkit folder with the runtime headers (nvcc may be a
# wrapper script outside the toolkit, as /usr/local/bin/nvcc is on some hosts).
CUDA_HOME ?= $(firstword $(foreach d,$(patsubst %/bin/nvcc,%,$(NVCC)) /usr/local/cuda,\
               $(if $(wildcard $(d)/include/cuda_runtime_api.h),$(d))))
ifeq ($(CUDA),auto)
  CUDA := $(if $(and $(NVCC),$(CU_SRC),$(CUDA_HOME)),1,0)
endif
ifeq ($(CUDA),1)
  CFLAGS += -DLYNN_CUDA -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
  NVFLAGS := -O3 -std=c++17 -Iinclude -Isrc -Xcompiler -fPIC,-Wall \
             -gencode arch=compute_90,code=sm_90 $(EXTRA_NVFLAGS)
  CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/%.o)
  $(info ✓ CUDA: $(NVCC), kernels: $(notdir $(CU_SRC)))
else
  CU_OBJ :=
  $(info ✓ CUDA: off (CPU build is complete))
endif

LIB_SRC := $(filter-out src/cmd/%,$(wildcard src/*/*.c))
CMD_SRC := $(wildcard src/cmd/*.c)
TEST_SRC := $(wildcard tests/check_*.c) tests/testutil.c
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC := $(wildcard tests/bench/bench_*.c)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/liblynn.a

.PHONY: all test test-run demo bench asan fuzz clean deps help-targets
.DEFAULT_GOAL := all

all: lynn
	$(info ✓ built ./lynn with $(words $(LIB_SRC)) library sources, $(words $(CMD_SRC)) command sources)

help-targets:
	@sed -n '3,11p' Makefile

GIT_HASH := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
$(BUILD)/githash.h: FORCE
	@mkdir -p $(BUILD)
	@echo '#define LYNN_GIT_HASH "$(GIT_HASH)"' > $@.new
	@cmp -s $@.new $@ && rm -f $@.new || mv $@.new $@
$(BUILD)/src/core/version.o: $(BUILD)/githash.h
FORCE:

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The sm_90 kernels also carry their PTX, so that a newer GPU can run them
# (lynn_cuda_nvfp4_linear's fallback where the native FP4 path does not apply).
$(BUILD)/kernels/nvfp4_gemm.o: NVFLAGS += -gencode arch=compute_90,code=compute_90

# The Blackwell FP4 path (untested on hardware) is also built for sm_100a/sm_120a.
$(BUILD)/kernels/nvfp4_fp4.o: NVFLAGS += -gencode arch=compute_100a,code=sm_100a \
	-gencode arch=compute_120a,code=sm_120a

$(BUILD)/kernels/%.o: kernels/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

# The runner benchmark (tests/bench/runner.sh, llama_cpp.sh, runner_cuda.sh).
$(BUILD)/bench_runner: tests/bench/bench_runner.c $(LIB)
	$(CC) $(CFLAGS) -O3 -o $@ $< $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

ifeq ($(BUILD),build)
lynn: $(CMD_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(CMD_OBJ) $(LIB) $(LDLIBS)
else
lynn: $(BUILD)/lynn
$(BUILD)/lynn: $(CMD_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(CMD_OBJ) $(LIB) $(LDLIBS)
endif

$(BUILD)/check_lynn: $(TEST_OBJ) $(LIB) lynn
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(LIB) $(CHECK_LIBS) $(LDLIBS)

# Set-up on a fresh Debian 12 machine: apt packages and the npm oracles.
deps:
	@sh tests/tools/deps.sh

test: deps
	@$(MAKE) --no-print-directory test-run

# The suites find ./lynn (or $(BUILD)/lynn) through LYNN_BIN.
test-run: $(BUILD)/check_lynn
	LYNN_BIN=$(if $(filter build,$(BUILD)),./lynn,$(BUILD)/lynn) $(BUILD)/check_lynn

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan CUDA=0 OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  test-run

demo: deps
	@$(MAKE) --no-print-directory all
	@sh tests/tools/demo.sh

bench: all
	@sh tests/bench/run.sh

# libFuzzer: the library rebuilt with clang and sanitizers, one binary per target.
FUZZ_BUILD := build/fuzz
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang CUDA=0 OPT=-O1 \
	  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
	  $(FUZZ_BUILD)/liblynn.a
	@set -e; for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  clang $(filter-out -MMD -MP -Werror,$(CFLAGS)) -Wno-error -fsanitize=fuzzer,address,undefined \
	    -I$(FUZZ_BUILD) $$f $(FUZZ_BUILD)/liblynn.a $(LDLIBS) -o $(FUZZ_BUILD)/$$n; \
	  mkdir -p $(FUZZ_BUILD)/corpus-$$n; \
	  seeds=$$( [ -d tests/fuzz/corpus/$$n ] && echo tests/fuzz/corpus/$$n || true ); \
	  echo "fuzz: $$n for $(FUZZ_TIME)s"; \
	  $(FUZZ_BUILD)/$$n -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 $(FUZZ_BUILD)/corpus-$$n $$seeds; \
	done

clean:
	rm -rf build lynn

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
