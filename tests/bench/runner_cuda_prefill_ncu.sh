#!/bin/sh
# runner_cuda_prefill_ncu.sh [OUT_DIR] [TOKENS] [MODEL_DIR...] - where a
# prefill of the CUDA runner spends its time (GPU machine only, never in CI):
# Nsight Compute times every kernel of one `lynn logits --last` over TOKENS
# ids (default 512: two passes of 256 rows; caches and clocks left alone),
# and tests/tools/ncu_passes.py --prefill sums them by kernel. Default
# models: runner_cuda.sh's mid-size model and its NVFP4 copy. Needs ./lynn
# built with CUDA, ncu, python3 with numpy.
set -e
cd "$(dirname "$0")/../.."
out=${1:-/tmp/lynn-runner-prefill-ncu}
tokens=${2:-512}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
mkdir -p "$out"
mid=/tmp/lynn-bench-qwen35moe
if [ $# -eq 0 ]; then
	[ -f "$mid/model.safetensors" ] || python3 tests/tools/gen_bench_model.py "$mid" >/dev/null
	[ -f "$mid-nvfp4/model.safetensors" ] || ./lynn quantize --nvfp4 "$mid" "$mid-nvfp4" -q
	set -- "$mid" "$mid-nvfp4"
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$(python3 -c "print(','.join(str((i * 7919 + 13) % 32768) for i in range($tokens)))")
for d in "$@"; do
	n=$(basename "$d")
	$NCU --csv --cache-control none --clock-control none --metrics gpu__time_duration.sum --print-units base \
		./lynn logits --model "$d" --ids "$ids" --last --out "$out/logits_$n.safetensors" --device cuda -q \
		>"$out/ncu_prefill_$n.csv" 2>"$out/ncu_prefill_$n.err" || { tail "$out/ncu_prefill_$n.err"; exit 1; }
	echo "== $d, $tokens tokens"
	python3 tests/tools/ncu_passes.py --prefill "$out/ncu_prefill_$n.csv"
done 2>&1 | tee "$out/runner_cuda_prefill_ncu.txt"
