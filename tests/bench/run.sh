#!/bin/sh
# run.sh - `make bench`: every benchmark, one line each below. Figures are
# copied by hand into docs/benchmarks.md with the command, machine and date.
set -e
cd "$(dirname "$0")/../.."
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
sh tests/bench/runner.sh
sh tests/bench/bench_eval.sh 50
sh tests/bench/llama_cpp.sh
