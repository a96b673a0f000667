#!/bin/sh
# jinja.sh - chat-template rendering: a 50-turn conversation with tools through Qwen3.5's template,
# lynn (bench_jinja.c) beside Jinja2 (the oracle, tests/bench/bench_jinja.py) on the same input.
set -e
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
/usr/bin/python3 tests/bench/bench_jinja.py write "$dir"
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/bench_jinja.c build/liblynn.a \
  $(pkg-config --libs libcjson libcurl libzstd openssl libmicrohttpd libpcre2-8 libutf8proc 2>/dev/null) \
  -lm -pthread -o build/bench_jinja
for t in Qwen3.5-4B Qwen-Qwen3-0.6B Qwen3-Coder; do
  build/bench_jinja tests/fixtures/templates/$t.jinja "$dir/messages.json" "$dir/tools.json" 2000
  /usr/bin/python3 tests/bench/bench_jinja.py time "$dir" tests/fixtures/templates/$t.jinja 200
done
rm -rf "$dir"
