#!/bin/sh
# demo.sh - lynn's main job on the bundled tiny model (run by `make demo`).
set -e
cd "$(dirname "$0")/../.."
echo "== lynn --version"
./lynn --version
echo "== lynn help"
./lynn help
if test -d tests/fixtures/qwen35moe-tiny; then echo "== lynn inspect tests/fixtures/qwen35moe-tiny"; ./lynn inspect tests/fixtures/qwen35moe-tiny; fi
echo "== lynn eval (four gates; scripted endpoint)"
sh tests/tools/demo_eval.sh
