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
# The same answers: the mid-size model's logits on both devices (one
# prefill) and a 32-token greedy continuation (decode steps, CUDA graphs).
ids=$(python3 -c 'print(",".join(str((i * 7919 + 13) % 32768) for i in range(64)))')
for dev in cpu cuda; do
	./lynn logits --model "$mid" --ids "$ids" --out "$out/logits_$dev.safetensors" --device $dev -q
	./lynn generate --model "$mid" --ids "$ids" --max-tokens 32 --print-ids --device $dev -q >"$out/gen_$dev.txt"
done
python3 - "$out" <<'PY' 2>&1 | tee -a "$out/runner_cuda.txt"
import sys, numpy as np
from safetensors.numpy import load_file
o = sys.argv[1]
a, b = (load_file("%s/logits_%s.safetensors" % (o, d))["logits"].astype(np.float64) for d in ("cpu", "cuda"))
cos = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
print("mid-size bf16, cuda vs cpu logits over %d positions: max|d| %.3g (max|logit| %.3g), cosine min %.7f, "
      "argmax equal at %d" % (a.shape[0], np.abs(a - b).max(), np.abs(a).max(), cos.min(),
                             int((a.argmax(1) == b.argmax(1)).sum())))
g = [open("%s/gen_%s.txt" % (o, d)).read().split() for d in ("cpu", "cuda")]
same = next((i for i, (x, y) in enumerate(zip(*g)) if x != y), min(map(len, g)))
print("greedy 32 tokens: cuda equals cpu for the first %d" % same)
PY
