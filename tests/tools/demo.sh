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
if test -d tests/fixtures/qwen35moe-tiny; then
	echo "== lynn serve (tiny model): one chat completion over HTTP, then SIGTERM drains it"
	. tests/tools/serve_start.sh
	serve_start --model tests/fixtures/qwen35moe-tiny --threads 1
	/usr/bin/python3 - "$serve_port" <<'PY' || echo "demo: the request failed"
import json, sys, urllib.request
body = {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 12, "temperature": 0}
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1],
                             json.dumps(body).encode(), {"Content-Type": "application/json"})
print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60)), indent=1, ensure_ascii=False))
PY
	kill -TERM "$serve_pid"
	wait "$serve_pid"
	cat "$serve_err"
	rm -f "$serve_err"
fi
