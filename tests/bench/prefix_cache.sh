#!/bin/sh
# prefix_cache.sh - `lynn serve`'s prefix cache: the same multi-turn chat
# (tests/bench/prefix_cache.py: a long system prompt, then turns answered
# with one token) against the server with --prefix-cache 0 and with the
# default, on serve.sh's mid-size random model (BENCH_SERVE_DIR; THREADS,
# default 2; TURNS, default 4).
set -e
cd "$(dirname "$0")/../.."
dir=${BENCH_SERVE_DIR:-/tmp/lynn-bench-serve}
[ -f "$dir/model.safetensors" ] ||
	/usr/bin/python3 tests/tools/gen_bench_model.py "$dir" --tokenizer tests/fixtures/qwen35moe-tiny
. tests/tools/serve_start.sh
for mb in 0 4096; do
	serve_start --model "$dir" --parallel 1 --threads "${THREADS:-2}" --ctx-size 32768 --prefix-cache $mb || exit 3
	echo "== lynn serve --ctx-size 32768 --prefix-cache $mb"
	/usr/bin/python3 tests/bench/prefix_cache.py "$serve_port" "${TURNS:-4}" || status=$?
	serve_stop
done
exit ${status:-0}
