#!/bin/sh
# cuda_nvfp4.sh OUTDIR [--check-only|--check-small|--time-only|--time-m1 [--l2-hot]] - build the CUDA NVFP4 checks and
# benchmark with nvcc + gcc alone (no other lynn dependency) and run them.
# Results: OUTDIR/bench_cuda_nvfp4.jsonl plus the table on stdout. NVCCFLAGS
# (environment) is passed to nvcc, e.g. -DTC3_D=8 for a kernel variant.
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-.}
shift || true
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
B=${BENCH_BUILD:-/tmp/lynn-cuda-bench}
mkdir -p "$B" "$OUT"
for f in src/formats/nvfp4.c src/formats/dtype.c src/cpu/nvfp4_matmul.c src/cpu/matmul.c \
	src/formats/ggml_quants.c src/core/err.c src/core/pool.c; do
	gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc -pthread -c "$f" -o "$B/$(basename "$f" .c).o"
done
$NVCC -O3 -std=c++17 -Iinclude -Ikernels -gencode arch=compute_90,code=sm_90 $NVCCFLAGS \
	-o "$B/bench_cuda_nvfp4" tests/bench/bench_cuda_nvfp4.cu kernels/nvfp4_gemm.cu \
	kernels/nvfp4_fp4.cu kernels/nvfp4_linear.cu "$B"/nvfp4.o "$B"/dtype.o "$B"/nvfp4_matmul.o \
	"$B"/matmul.o "$B"/ggml_quants.o "$B"/err.o "$B"/pool.o \
	-lcublasLt -lpthread
"$B/bench_cuda_nvfp4" "$OUT" "$@"
