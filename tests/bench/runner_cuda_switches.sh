#!/bin/sh
# runner_cuda_switches.sh [OUT_DIR] - the CUDA runner's switches against each
# other on a 24-row prefill (GPU machine only, never in CI): `lynn logits`
# over runner_cuda.sh's mid-size model and its NVFP4 copy with the expert
# tiles on and off (LYNN_CUDA_NO_EXPERT_TILES: the same logits, bit for
# bit), and the fused NVFP4 expert MLP against two banks
# (LYNN_CUDA_NO_FUSED_MLP: SwiGLU's exp is another function there, so an
# activation's bf16 rounding can differ). Prints max|d| per pair and its
# rows. Needs ./lynn built with CUDA, python3 with numpy and safetensors.
set -e
cd "$(dirname "$0")/../.."
out=${1:-/tmp/lynn-runner-switches}
mkdir -p "$out"
mid=/tmp/lynn-bench-qwen35moe
[ -f "$mid/model.safetensors" ] || python3 tests/tools/gen_bench_model.py "$mid" >/dev/null
[ -f "$mid-nvfp4/model.safetensors" ] || ./lynn quantize --nvfp4 "$mid" "$mid-nvfp4" -q
ids=$(python3 -c 'print(",".join(str((i * 7919 + 13) % 32768) for i in range(24)))')
run() { # NAME MODEL [VAR=1 ...]
	n=$1 d=$2
	shift 2
	env "$@" ./lynn logits --model "$d" --ids "$ids" --out "$out/$n.safetensors" --device cuda -q
}
run s "$mid-nvfp4" LYNN_CUDA_NO_SHARED_BANK=1
run st "$mid-nvfp4" LYNN_CUDA_NO_SHARED_BANK=1 LYNN_CUDA_NO_EXPERT_TILES=1
run u "$mid-nvfp4" LYNN_CUDA_NO_FUSED_MLP=1
run f "$mid-nvfp4"
run ft "$mid-nvfp4" LYNN_CUDA_NO_EXPERT_TILES=1
run b "$mid"
run bt "$mid" LYNN_CUDA_NO_EXPERT_TILES=1
python3 - "$out" <<'PY' | tee "$out/runner_cuda_switches.txt"
import sys, numpy as np
from safetensors.numpy import load_file
o = sys.argv[1]
L = lambda n: load_file("%s/%s.safetensors" % (o, n))["logits"]
for a, b in [("s", "st"), ("st", "u"), ("f", "ft"), ("b", "bt")]:
    d = np.abs(L(a) - L(b))
    print(a, b, "max|d| %.3g" % d.max(), "rows:", np.round(d.max(1), 4)[:8])
PY
