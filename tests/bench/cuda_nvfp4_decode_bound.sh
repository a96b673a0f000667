#!/bin/sh
# cuda_nvfp4_decode_bound.sh OUTDIR - how much of tc3's time is the E2M1
# decode? Times the M = 1 and 4 shapes (cuda_nvfp4.sh --time-m1) with the
# kernel as it is, then on a copy of the tree whose lynn_tc_dec8 is replaced
# by a stand-in that is NOT exact (timing only; its products are wrong):
#   free: no decode at all (4 trivial operations per 8 weights);
#   mask: the cost of a 2-operation f16 field decode plus an f16 scale
#         multiply per pair, i.e. what a load-time nibble repacking could
#         reach at best (no such exact layout exists: see docs/benchmarks.md).
# Output: OUTDIR/{exact,free,mask}/bench_cuda_nvfp4.jsonl and the tables.
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-.}
mkdir -p "$OUT"
sh tests/bench/cuda_nvfp4.sh "$OUT/exact" --time-m1 | tee "$OUT/exact.txt"
for v in free mask; do
	T=$(mktemp -d)
	mkdir -p "$T/tests"
	cp -r include kernels src "$T/"
	cp -r tests/bench "$T/tests/"
	case $v in
	free) body='lo0 = w; lo1 = w ^ sc; hi0 = w + sh; hi1 = w | sc; return;' ;;
	mask) body='lo0 = lynn_standin_mul(w \& 0x8E008E00u, sc); lo1 = lynn_standin_mul((w >> 3) \& 0x8E008E00u, sc); hi0 = lynn_standin_mul((w >> 6) \& 0x8E008E00u, sh); hi1 = lynn_standin_mul((w << 2) \& 0x8E008E00u, sh); return;' ;;
	esac
	# the stand-in goes first in lynn_tc_dec8's body; the f16 multiply helper before it
	sed -i -e "/^static __device__ __forceinline__ void lynn_tc_dec8(/,/^{/ s/^{/{\n\t$body/" \
		-e 's/^static __device__ __forceinline__ uint32_t lynn_hi16(/static __device__ __forceinline__ uint32_t lynn_standin_mul(uint32_t a, uint32_t b) { uint32_t d; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d; }\n&/' \
		"$T/kernels/nvfp4_gemm.cu"
	grep -q lynn_standin_mul "$T/kernels/nvfp4_gemm.cu"
	BENCH_BUILD="$T/build" sh "$T/tests/bench/cuda_nvfp4.sh" "$OUT/$v" --time-m1 | tee "$OUT/$v.txt"
	rm -rf "$T"
done
