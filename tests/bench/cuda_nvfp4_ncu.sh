#!/bin/sh
# cuda_nvfp4_ncu.sh OUTDIR - Nsight Compute on tc3's one-token launches (the
# in_proj_qkv shape, run 22: tests/bench/results/h200_run22_ncu_tc3_in_proj.txt,
# and the expert MLP's gate/up launch), with the weights served from L2
# (--time-m1 --l2-hot, caches not flushed) and from DRAM (caches flushed),
# clocks left alone. Builds and times through cuda_nvfp4.sh first (GPU
# machine; ncu on PATH or in /usr/local/cuda/bin).
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-.}
B=${BENCH_BUILD:-/tmp/lynn-cuda-bench}
mkdir -p "$OUT"
BENCH_BUILD="$B" sh tests/bench/cuda_nvfp4.sh "$OUT" --time-m1 >"$OUT/time_m1.txt"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for mode in hot cold; do
	for gated in 0 1; do
		a=""; cc=all
		[ $mode = hot ] && { a="--l2-hot"; cc=none; }
		# launch 8 of the kernel: in_proj_qkv's (or the MoE call's) AUTO b2b timing, past its warm-up
		$NCU --clock-control none --cache-control $cc --kernel-name-base demangled \
			-k "regex:tc3_kernel<.int.1, __nv_bfloat16, .int.4, .int.2, .bool.$gated" \
			--launch-skip 7 --launch-count 1 --set full "$B/bench_cuda_nvfp4" "$OUT" --time-m1 $a \
			2>&1 | grep -v "^  sweep\|^in_proj\|^moe\|^lm_head" >"$OUT/ncu_${mode}_$gated.txt"
	done
done
