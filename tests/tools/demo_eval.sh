#!/bin/sh
# demo_eval.sh - `lynn eval` end to end for `make demo`. In-process eval of the
# tiny model (adapter vs base) waits for the runner's generate entry point;
# until then the demo runs against the scripted endpoint of tests/bench.
set -e
cd "$(dirname "$0")/../.."
PORT=$((30000 + $$ % 20000))
OUT=$(mktemp -d)
node tests/bench/eval_endpoint.js $PORT 5 2>/dev/null &
SRV=$!
trap 'kill $SRV 2>/dev/null' EXIT
sleep 0.5
./lynn eval --model http://127.0.0.1:$PORT/v1 --adapter cand --sanity-pass --model-tag demo \
	--out-dir "$OUT" --concurrency 16 || true
echo "(reports in $OUT)"
