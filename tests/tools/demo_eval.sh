#!/bin/sh
# demo_eval.sh - the ship workflow end to end for `make demo`, on the bundled
# tiny model in-process: `lynn sanity` (is the LoRA adapter active?) writes
# its report, then `lynn eval` (candidate = base + the tiny LoRA adapter,
# baseline = the base with the adapter off) reads it, on the small bilingual
# test prompt set (the shipped sets in prompts/ take minutes on 2 cores).
# Prints the verdict and where the reports are.
set -e
cd "$(dirname "$0")/../.."
OUT=$(mktemp -d)
echo "-- lynn sanity"
./lynn sanity --base tests/fixtures/qwen35moe-tiny --adapter tests/fixtures/lora-tiny \
	--out-json "$OUT/sanity.json" || true
echo "-- lynn eval"
./lynn eval --model tests/fixtures/qwen35moe-tiny --adapter tests/fixtures/lora-tiny \
	--sanity-json "$OUT/sanity.json" --prompts-dir tests/fixtures/eval/prompts \
	--model-tag tiny-demo --out-dir "$OUT" || true
echo "(reports in $OUT)"
