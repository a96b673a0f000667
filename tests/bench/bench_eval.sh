#!/bin/sh
# bench_eval.sh - lynn eval against a scripted endpoint: total wall time vs the
# ideal (per-request latency x requests / concurrency) at several concurrencies.
#   sh tests/bench/bench_eval.sh [LATENCY_MS]
set -e
cd "$(dirname "$0")/../.."
LAT=${1:-50}
PORT=$((20000 + $$ % 20000))
TMP=$(mktemp -d)
node tests/bench/eval_endpoint.js $PORT $LAT 2>/dev/null &
SRV=$!
trap 'kill $SRV 2>/dev/null; rm -rf "$TMP"' EXIT
sleep 0.5
N=$(cat prompts/*.jsonl | grep -c .)
REQ=$((2 * N))
echo "eval bench: $REQ requests (2 sides x $N prompts), ${LAT} ms each"
printf "%-12s %10s %10s %8s\n" concurrency wall_s ideal_s ratio
for C in 1 4 16 64; do
	T0=$(date +%s.%N)
	./lynn -q eval --model http://127.0.0.1:$PORT/v1 --adapter cand --output "$TMP/r$C.json" \
		--concurrency $C --sanity-pass >/dev/null || true
	T1=$(date +%s.%N)
	awk -v t0=$T0 -v t1=$T1 -v n=$REQ -v l=$LAT -v c=$C 'BEGIN {
		w = t1 - t0; i = n * l / 1000 / c; printf "%-12d %10.2f %10.2f %8.2f\n", c, w, i, w / i }'
done
