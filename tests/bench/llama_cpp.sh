#!/bin/sh
# llama_cpp.sh - lynn's CPU runner side by side with llama.cpp on the same
# weights (optional: needs a llama.cpp build, LLAMA_BUILD, default
# /work/oracles/llama-build, and its source for llama.h, LLAMA_SRC).
# 1. parity: the tiny fixture written as GGUF (tests/tools/hf_to_gguf_qwen35moe.py);
#    llama.cpp's logits must agree with lynn's before speed is compared;
# 2. speed: the bench model as BF16 GGUF, llama-bench -p 128 -n 32 at 1 and 2 threads.
set -e
cd "$(dirname "$0")/../.."
B=${LLAMA_BUILD:-/work/oracles/llama-build}
S=${LLAMA_SRC:-/work/oracles/llama.cpp}
dir=${BENCH_MODEL_DIR:-/tmp/lynn-bench-qwen35moe}
lib=$(ls "$B"/bin/libllama.so "$B"/src/libllama.so 2>/dev/null | head -1 || true)
if [ -z "$lib" ] || [ ! -x "$B/bin/llama-bench" ]; then
  echo "== llama.cpp: no build at $B (skipped)"; exit 0
fi
libdir=$(dirname "$lib")
ggmldir=$(dirname "$(ls "$B"/bin/libggml.so "$B"/ggml/src/libggml.so 2>/dev/null | head -1)")
${CC:-cc} -O2 -I"$S/include" -I"$S/ggml/include" tests/bench/llama_logits.c -L"$libdir" -L"$ggmldir" \
  -Wl,-rpath,"$libdir" -Wl,-rpath,"$ggmldir" -lllama -o build/llama_logits
tmp=$(mktemp -d)
/usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py tests/fixtures/qwen35moe-tiny "$tmp/tiny.gguf" >/dev/null
ids=$(/usr/bin/python3 -c "import json; print(' '.join(map(str, json.load(open('tests/fixtures/ref_generate.json'))['cases'][2]['prompt_ids'])))")
./lynn logits --model tests/fixtures/qwen35moe-tiny --ids "$ids" --out "$tmp/lynn.safetensors" -q
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
print("== llama.cpp parity on the tiny model (%d tokens): max|d| %.3g, min cosine %.6f, argmax agree %d/%d"
      % (a.shape[0], np.abs(a - l).max(), cos, int((a.argmax(1) == l.argmax(1)).sum()), a.shape[0]))
PY
[ -f "$dir/model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_model.py "$dir"
[ -f "$dir.gguf" ] || /usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py "$dir" "$dir.gguf" >/dev/null
echo "== llama.cpp llama-bench (BF16 GGUF of $dir)"
"$B/bin/llama-bench" -m "$dir.gguf" -p 128 -n 32 -t 1,2 -r 2
rm -rf "$tmp"
