#!/bin/sh
# runner_cuda_ncu.sh [OUT_DIR] [MODEL_DIR...] - where a decode step of the
# CUDA runner spends its time (GPU machine only, never in CI): Nsight
# Compute times every kernel of a 6-token `lynn generate` (graphs off, so
# each launch is seen; caches and clocks left alone, as in a real run), and
# tests/tools/ncu_passes.py sums the decode passes by kernel; then the same
# run with graphs on, each graph launch (a whole pass) timed whole.
# Default models: runner_cuda.sh's real4 and its NVFP4
# copy (4 layers of Qwen3.6-35B-A3B's shapes). Needs ./lynn built with
# CUDA, ncu, python3 with numpy.
set -e
cd "$(dirname "$0")/../.."
out=${1:-/tmp/lynn-runner-ncu}
[ $# -gt 0 ] && shift
mkdir -p "$out"
real=/tmp/lynn-bench-real4
if [ $# -eq 0 ]; then
	[ -f "$real/model.safetensors" ] || python3 tests/tools/gen_bench_model.py "$real" --real 4 >/dev/null
	[ -f "$real-nvfp4/model.safetensors" ] || ./lynn quantize --nvfp4 "$real" "$real-nvfp4" -q
	set -- "$real" "$real-nvfp4"
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for d in "$@"; do
	n=$(basename "$d")
	LYNN_CUDA_NO_GRAPHS=1 $NCU --csv --cache-control none --clock-control none --metrics gpu__time_duration.sum --print-units base \
		./lynn generate --model "$d" --ids 11,12,13,14,15,16,17,18 --max-tokens 6 --print-ids --device cuda -q \
		>"$out/ncu_$n.csv" 2>"$out/ncu_$n.err" || { tail "$out/ncu_$n.err"; exit 1; }
	echo "== $d"
	python3 tests/tools/ncu_passes.py "$out/ncu_$n.csv"
	# the same run with its CUDA graphs, each timed whole
	$NCU --csv --graph-profiling graph --cache-control none --clock-control none \
		--metrics gpu__time_duration.sum --print-units base \
		./lynn generate --model "$d" --ids 11,12,13,14,15,16,17,18 --max-tokens 6 --print-ids --device cuda -q \
		>"$out/ncu_graph_$n.csv" 2>>"$out/ncu_$n.err" || { tail "$out/ncu_$n.err"; exit 1; }
	python3 tests/tools/ncu_passes.py --graphs "$out/ncu_graph_$n.csv"
done 2>&1 | tee "$out/runner_cuda_ncu.txt"
