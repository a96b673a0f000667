#!/bin/sh
# run.sh - `make bench`: every benchmark, one line each below. Figures are
# copied by hand into docs/benchmarks.md with the command, machine and date.
set -e
cd "$(dirname "$0")/../.."
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
sh tests/bench/bench_inspect.sh
sh tests/bench/runner.sh
sh tests/bench/serve.sh
sh tests/bench/prefix_cache.sh
sh tests/bench/bench_eval.sh 50
sh tests/bench/bench_eval_inproc.sh
sh tests/bench/llama_cpp.sh
sh tests/bench/gguf.sh
sh tests/bench/cpu_nvfp4.sh
sh tests/bench/jinja.sh
sh tests/bench/bench_pack.sh
sh tests/bench/merge.sh
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude $(pkg-config --cflags libcjson) tests/bench/bench_score.c build/liblynn.a $(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -o build/bench_score && build/bench_score && { /usr/bin/python3 tests/bench/bench_score_peers.py || echo "score peers: sacreBLEU / rouge-score sources not found (SACREBLEU_SRC, ROUGE_SRC)"; }
sh tests/bench/bench_tok.sh
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/bench_sample.c build/liblynn.a -lm -o build/bench_sample && build/bench_sample build/bench_sample.f32 && /usr/bin/python3 tests/bench/bench_sample_peer.py build/bench_sample.f32
sh tests/bench/bench_qv.sh
