#!/bin/sh
# demo.sh - lynn's main job on the bundled tiny model (run by `make demo`).
set -e
cd "$(dirname "$0")/../.."
echo "== lynn --version"
./lynn --version
echo "== lynn help"
./lynn help
[ -d tests/fixtures/qwen35moe-tiny ] && { echo "== lynn generate (tiny model, greedy)"; ./lynn generate --model tests/fixtures/qwen35moe-tiny --ids "481 385 261" --print-ids --max-tokens 16; }
[ -d tests/fixtures/qwen35moe-tiny ] && { echo "== lynn template (chat template, tools, thinking on)"; ./lynn template --model tests/fixtures/qwen35moe-tiny --messages tests/fixtures/templates/conversations/07-tool-call-string-number.messages.json --tools tests/fixtures/templates/conversations/07-tool-call-string-number.tools.json --think | tail -12; echo; }
if test -d tests/fixtures/qwen35moe-tiny; then echo "== lynn inspect tests/fixtures/qwen35moe-tiny"; ./lynn inspect tests/fixtures/qwen35moe-tiny; fi
echo "== lynn eval (four gates; tiny model + LoRA vs base, in-process)"
sh tests/tools/demo_eval.sh
[ -d tests/fixtures/qwen35moe-tiny ] && { echo "== lynn quant-verify (tiny model vs its f32 copy and a Q8_0 GGUF of it; random weights, so quality fails)"; ./lynn quant-verify --reference tests/fixtures/qwen35moe-tiny --variant f32=tests/fixtures/qwen35moe-tiny-text-f32 --variant q8_0=tests/fixtures/gguf/tiny-q8_0.gguf --max-tokens 16 || true; }
