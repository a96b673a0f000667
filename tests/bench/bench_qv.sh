#!/bin/sh
# bench_qv.sh - lynn quant-verify: offline scoring throughput (every pair of
# the score corpus as reference / variant outputs: similarity + quality per
# item) and an in-process run on the tiny checkpoints (6 built-in prompts x
# 64 tokens, reference + one variant, loaded one at a time), with --concurrency
# 1 and 4 alternating.
#   sh tests/bench/bench_qv.sh
set -e
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/ref.jsonl", "w") as r, open(f"{d}/hyp.jsonl", "w") as h:
    for k in range(10):
        for line in open("tests/fixtures/score/corpus.jsonl"):
            x = json.loads(line)
            r.write(json.dumps({"id": f"{k}-{x['id']}", "output": x["ref"]}, ensure_ascii=False) + "\n")
            h.write(json.dumps({"id": f"{k}-{x['id']}", "output": x["hyp"]}, ensure_ascii=False) + "\n")
PY
N=$(grep -c . "$TMP/ref.jsonl")
T0=$(date +%s.%N)
./lynn -q quant-verify --reference-outputs "$TMP/ref.jsonl" --variant-outputs v="$TMP/hyp.jsonl" --json >/dev/null || true
T1=$(date +%s.%N)
awk -v t0=$T0 -v t1=$T1 -v n=$N 'BEGIN { w = t1 - t0; printf "quant-verify offline: %d items in %.2f s (%.0f items/s)\n", n, w, n / w }'
for C in 1 4 1 4; do # one prompt at a time, then four generated together (the default)
	T0=$(date +%s.%N)
	./lynn -q quant-verify --reference tests/fixtures/qwen35moe-tiny \
		--variant f32=tests/fixtures/qwen35moe-tiny-text-f32 --concurrency $C --json > "$TMP/r.json" || true
	T1=$(date +%s.%N)
	python3 -c "
import json; r = json.load(open('$TMP/r.json')); v = r['variants'][0]
print('quant-verify in-process (tiny), concurrency $C: %.2f s wall, reference %.0f tok/s, variant %.0f tok/s a request' % (
      $T1 - $T0, r['reference']['avg_tokens_per_sec'], v['avg_tokens_per_sec']))"
done
