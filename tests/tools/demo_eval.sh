#!/bin/sh
# demo_eval.sh - `lynn eval` end to end for `make demo`: the bundled tiny model
# in-process, candidate = base + the tiny LoRA adapter, baseline = the base
# (adapter off), on the small bilingual test prompt set (the shipped sets in
# prompts/ take a few minutes on 2 cores). Prints the verdict and the report.
set -e
cd "$(dirname "$0")/../.."
OUT=$(mktemp -d)
./lynn eval --model tests/fixtures/qwen35moe-tiny --adapter tests/fixtures/lora-tiny \
	--sanity-json tests/fixtures/eval/sanity_pass.json --prompts-dir tests/fixtures/eval/prompts \
	--model-tag tiny-demo --out-dir "$OUT" || true
echo "(reports in $OUT)"
