#!/bin/sh
# gguf.sh - the CPU runner on GGUF files: the 4-layer bench model
# (gen_bench_model.py --small: hidden 1024, 64 experts top-8, bf16) as its
# folder, as a BF16 GGUF (tests/tools/hf_to_gguf_qwen35moe.py) and as Q4_K_M
# (llama-quantize; needs a llama.cpp build, LLAMA_BUILD, default
# /work/oracles/llama-build), prefill 128 ids + 32 greedy tokens, 2 threads;
# then llama.cpp on the Q4_K_M file (plain CPU kernels, tests/tools/
# llama_plain_cpu.h), same protocol.
set -e
cd "$(dirname "$0")/../.."
B=${LLAMA_BUILD:-/work/oracles/llama-build}
S=${LLAMA_SRC:-/work/oracles/llama.cpp}
dir=${BENCH_MODEL_DIR:-/tmp/lynn-bench-qwen35moe}-small
[ -f "$dir/model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_model.py "$dir" --small >/dev/null
[ -f "$dir.bf16.gguf" ] || /usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py "$dir" "$dir.bf16.gguf" >/dev/null
ids=$(seq 1 128 | tr '\n' ' ')
models="$dir $dir.bf16.gguf"
if [ -x "$B/bin/llama-quantize" ]; then
  [ -f "$dir.q4km.gguf" ] || "$B/bin/llama-quantize" "$dir.bf16.gguf" "$dir.q4km.gguf" Q4_K_M >/dev/null 2>&1
  models="$models $dir.q4km.gguf"
fi
for m in $models; do
  echo "== lynn generate $(basename "$m"): $(./lynn generate --model "$m" --ids "$ids" --max-tokens 32 \
    --print-ids --threads 2 2>&1 >/dev/null | tail -1)"
done
if [ -f "$B/src/libllama.a" ] && [ -f "$dir.q4km.gguf" ]; then
  cc -O2 -I"$S/include" -I"$S/ggml/include" -include tests/tools/llama_plain_cpu.h tests/bench/llama_logits.c \
    "$B/src/libllama.a" "$B/ggml/src/libggml.a" "$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a" \
    -lstdc++ -fopenmp -lm -pthread -o build/llama_logits_plain
  echo "== $(build/llama_logits_plain --bench "$dir.q4km.gguf" 128 32 2 2>/dev/null | tail -1)"
fi
