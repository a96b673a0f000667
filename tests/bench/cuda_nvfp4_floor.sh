#!/bin/sh
# cuda_nvfp4_floor.sh OUTDIR - build and run tests/bench/cuda_nvfp4_floor.cu
# (nvcc + gcc only; on the GPU machine), then Nsight Compute on tc2 when ncu
# is there. Output: OUTDIR/floor.txt, OUTDIR/ncu.txt.
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-.}
B=${BENCH_BUILD:-/tmp/lynn-cuda-floor}
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
mkdir -p "$B" "$OUT"
gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -c src/core/err.c -o "$B/err.o"
$NVCC -O3 -std=c++17 -Iinclude -Ikernels -gencode arch=compute_90,code=sm_90 \
	-o "$B/floor" tests/bench/cuda_nvfp4_floor.cu "$B/err.o" -lcublasLt
"$B/floor" | tee "$OUT/floor.txt"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$NCU" ]; then
	"$NCU" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
		--section Occupancy --section SchedulerStats --section LaunchStats \
		-k regex:tc2 -c 9 "$B/floor" prof > "$OUT/ncu.txt" 2>&1 || true
fi
