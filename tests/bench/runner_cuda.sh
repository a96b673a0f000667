#!/bin/sh
# runner_cuda.sh [OUT_DIR] - the CUDA runner on the GPU machine (never in CI):
# prefill and decode tokens/s against the device's copy bandwidth, with the
# CPU runner beside it, on
#  - the random mid-size model of runner.sh (bf16) and its NVFP4 copy
#    (lynn quantize --nvfp4);
#  - 4 layers of Qwen3.6-35B-A3B's own shapes (gen_bench_model.py --real 4:
#    3 DeltaNet + 1 full attention, 256 experts top-8, vocab 248320), bf16
#    and NVFP4: one layer group of the real model.
# Needs ./lynn and build/bench_runner built with CUDA (make; make
# build/bench_runner), python3 with numpy. Models go to /tmp.
set -e
cd "$(dirname "$0")/../.."
out=${1:-/tmp/lynn-runner-cuda}
mkdir -p "$out"
mid=/tmp/lynn-bench-qwen35moe real=/tmp/lynn-bench-real4
[ -f "$mid/model.safetensors" ] || python3 tests/tools/gen_bench_model.py "$mid" >/dev/null
[ -f "$real/model.safetensors" ] || python3 tests/tools/gen_bench_model.py "$real" --real 4 >/dev/null
for d in "$mid" "$real"; do
	[ -f "$d-nvfp4/model.safetensors" ] || ./lynn quantize --nvfp4 "$d" "$d-nvfp4" -q
done
for d in "$mid" "$mid-nvfp4" "$real" "$real-nvfp4"; do
	echo "== $d"
	LYNN_DEVICE=cuda build/bench_runner "$d" 128 64 1
	LYNN_DEVICE=cpu build/bench_runner "$d" 128 8 16
done 2>&1 | tee "$out/runner_cuda.txt"
