#!/bin/sh
# demo.sh - lynn's main job on the bundled tiny model (run by `make demo`).
set -e
cd "$(dirname "$0")/../.."
echo "== lynn --version"
./lynn --version
echo "== lynn help"
./lynn help
[ -d tests/fixtures/qwen35moe-tiny ] && { echo "== lynn generate (tiny model, greedy)"; ./lynn generate --model tests/fixtures/qwen35moe-tiny --ids "481 385 261" --print-ids --max-tokens 16; }
if test -d tests/fixtures/qwen35moe-tiny; then echo "== lynn inspect tests/fixtures/qwen35moe-tiny"; ./lynn inspect tests/fixtures/qwen35moe-tiny; fi
echo "== lynn eval (four gates; scripted endpoint)"
sh tests/tools/demo_eval.sh
