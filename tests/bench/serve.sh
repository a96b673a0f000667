#!/bin/sh
# serve.sh - `lynn serve` measured by `lynn bench`: the mid-size random
# Qwen3.5-MoE of runner.sh (vocabulary cut to the tiny model's tokenizer,
# which it carries, so the server has text), streamed chat completions at
# concurrency 1, 2 and 4 (4 generated together: continuous batching), beside
# the engine alone on the same weights (bench_runner: prefill and decode
# without HTTP). BENCH_SERVE_DIR overrides where the model is kept; THREADS
# the server's threads (default 2).
set -e
cd "$(dirname "$0")/../.."
dir=${BENCH_SERVE_DIR:-/tmp/lynn-bench-serve}
[ -f "$dir/model.safetensors" ] ||
	/usr/bin/python3 tests/tools/gen_bench_model.py "$dir" --tokenizer tests/fixtures/qwen35moe-tiny
${CC:-cc} -O3 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/bench_runner.c build/liblynn.a \
  $(pkg-config --libs libcjson libcurl libzstd openssl libmicrohttpd libpcre2-8 libutf8proc 2>/dev/null) \
  -lm -pthread -o build/bench_runner
echo "== engine alone: $dir"
build/bench_runner "$dir" 64 32 "${THREADS:-2}"
. tests/tools/serve_start.sh
serve_start --model "$dir" --parallel 4 --threads "${THREADS:-2}" || exit 3
echo "== lynn serve (4 parallel) under lynn bench"
./lynn bench --endpoint "http://127.0.0.1:$serve_port/v1" --concurrency 1,2,4 --prompt-tokens 8 \
	--max-tokens 64 --requests 8 --json || status=$?
serve_stop
exit ${status:-0}
