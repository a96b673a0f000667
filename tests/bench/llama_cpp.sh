#!/bin/sh
# llama_cpp.sh - lynn's CPU runner side by side with llama.cpp on the same
# weights (optional: needs a llama.cpp build with its static or shared libs,
# LLAMA_BUILD, default /work/oracles/llama-build, and its source, LLAMA_SRC).
# 1. parity: the tiny text-only f32 fixture as GGUF (tests/tools/
#    hf_to_gguf_qwen35moe.py); llama.cpp's logits must agree with lynn's;
# 2. speed: the bench model with F16 matrices (gen_bench_model.py --f16) in
#    both runners, prefill 128 + 32 greedy decode steps at 1 and 2 threads
#    (tests/bench/llama_logits.c --bench, same protocol as bench_runner.c).
set -e
cd "$(dirname "$0")/../.."
B=${LLAMA_BUILD:-/work/oracles/llama-build}
S=${LLAMA_SRC:-/work/oracles/llama.cpp}
dir=${BENCH_MODEL_DIR:-/tmp/lynn-bench-qwen35moe}-f16
if [ ! -f "$B/src/libllama.a" ] && [ ! -f "$B/bin/libllama.so" ]; then
  echo "== llama.cpp: no build at $B (skipped)"; exit 0
fi
if [ -f "$B/src/libllama.a" ]; then
  libs="$B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -lstdc++ -fopenmp"
else
  libs="-L$B/bin -Wl,-rpath,$B/bin -lllama"
fi
${CC:-cc} -O2 -I"$S/include" -I"$S/ggml/include" tests/bench/llama_logits.c $libs -lm -pthread -o build/llama_logits
tmp=$(mktemp -d)
/usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py tests/fixtures/qwen35moe-tiny-text-f32 "$tmp/tiny.gguf" >/dev/null
ids=$(/usr/bin/python3 -c "import json; print(' '.join(map(str, json.load(open('tests/fixtures/ref_generate.json'))['cases'][2]['prompt_ids'])))")
./lynn logits --model tests/fixtures/qwen35moe-tiny-text-f32 --ids "$ids" --out "$tmp/lynn.safetensors" -q
build/llama_logits "$tmp/tiny.gguf" "$ids" "$tmp/llama.f32" 2>/dev/null
/usr/bin/python3 - "$tmp" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
b = open(d + "/lynn.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])["logits"]
a = np.frombuffer(b[8 + n:], dtype=np.float32).reshape(h["shape"])
l = np.fromfile(d + "/llama.f32", dtype=np.float32).reshape(a.shape)
cos = min(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(a, l))
print("== llama.cpp parity, tiny f32 model, %d tokens: max|d| %.3g, min cosine %.6f, argmax agree %d/%d"
      % (a.shape[0], np.abs(a - l).max(), cos, int((a.argmax(1) == l.argmax(1)).sum()), a.shape[0]))
PY
[ -f "$dir/model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_model.py "$dir" --f16
[ -f "$dir.gguf" ] || /usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py "$dir" "$dir.gguf" >/dev/null
echo "== F16 bench model ($dir): lynn, then llama.cpp"
make -s build/bench_runner
build/bench_runner "$dir" 128 32 1 2
for t in 1 2; do build/llama_logits --bench "$dir.gguf" 128 32 $t 2>/dev/null; done
rm -rf "$tmp"
