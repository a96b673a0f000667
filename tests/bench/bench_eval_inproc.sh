#!/bin/sh
# bench_eval_inproc.sh - lynn eval in-process (the engine, no endpoint) on
# the bundled tiny model and its LoRA over the fixture prompt sets (36
# requests: 18 candidate, 18 baseline), at --concurrency 1, 4, 8 and 16:
# the requests of a side generated that many together. MODEL: another
# model folder instead, as both candidate and --base; THREADS: the
# engine's threads (default 2); extra arguments go to lynn eval (e.g.
# --device cuda).
set -e
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -n "$MODEL" ]; then
	set -- --model "$MODEL" --base "$MODEL" "$@"
else
	set -- --model tests/fixtures/qwen35moe-tiny --adapter tests/fixtures/lora-tiny "$@"
fi
echo "eval in-process: $*, 36 requests, threads ${THREADS:-2}"
printf "%-12s %10s\n" concurrency wall_s
for C in 1 4 8 16; do
	T0=$(date +%s.%N)
	st=0
	./lynn -q eval --sanity-pass --prompts-dir tests/fixtures/eval/prompts --output "$TMP/r$C.json" \
		--threads "${THREADS:-2}" --concurrency $C "$@" >/dev/null 2>"$TMP/err" || st=$?
	T1=$(date +%s.%N)
	[ $st -le 1 ] || { cat "$TMP/err" >&2; exit 3; } # 1: the verdict is a fail
	awk -v t0=$T0 -v t1=$T1 -v c=$C 'BEGIN { printf "%-12d %10.2f\n", c, t1 - t0 }'
done
