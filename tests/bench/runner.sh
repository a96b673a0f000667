#!/bin/sh
# runner.sh - the CPU runner on a random mid-size Qwen3.5-MoE (generated here,
# never committed) and on its NVFP4 quantization by `lynn quantize --nvfp4`:
# prefill and decode tokens/s at 1 and 2 threads against the memory roofline.
# BENCH_MODEL_DIR overrides where the model is kept (the NVFP4 copy goes
# beside it, in DIR-nvfp4).
set -e
cd "$(dirname "$0")/../.."
dir=${BENCH_MODEL_DIR:-/tmp/lynn-bench-qwen35moe}
[ -f "$dir/model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_model.py "$dir"
make -s build/bench_runner
echo "== runner: $dir"
build/bench_runner "$dir" 128 32 1 2
[ -f "$dir-nvfp4/model.safetensors" ] || ./lynn quantize --nvfp4 "$dir" "$dir-nvfp4"
echo "== runner: $dir-nvfp4"
build/bench_runner "$dir-nvfp4" 128 32 1 2
