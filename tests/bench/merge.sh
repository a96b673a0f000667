#!/bin/sh
# merge.sh - `lynn merge` on the benchmark model (gen_bench_model.py, ~1.8 GB
# bf16) with a rank-16 adapter on every attention/DeltaNet/shared-expert
# projection: wall time, throughput and peak RSS, against a plain `cp` of the
# same checkpoint on the same disk (the disk-bandwidth reference).
set -e
cd "$(dirname "$0")/../.."
dir=${BENCH_MODEL_DIR:-/tmp/lynn-bench-qwen35moe}
[ -f "$dir/model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_model.py "$dir"
ad=${dir}-adapter
[ -f "$ad/adapter_model.safetensors" ] || /usr/bin/python3 tests/tools/gen_bench_adapter.py "$dir" "$ad" 16
out=${dir}-merged
bytes=$(stat -c %s "$dir/model.safetensors")
sync
rm -rf "$out" "$out.cp"
t0=$(date +%s.%N); cp "$dir/model.safetensors" "$out.cp"; sync; t1=$(date +%s.%N)
rm -f "$out.cp"
/usr/bin/time -f "%e %M" -o /tmp/lynn-merge-time ./lynn -q merge --base "$dir" --adapter "$ad" \
  --output "$out" --skip-coherence --shard-size 500MB >/dev/null
sync; t2=$(date +%s.%N)
read -r wall rss </tmp/lynn-merge-time
echo "== merge: $(echo "$bytes" | awk '{printf "%.2f GB", $1/1e9}') checkpoint, rank-16 adapter"
awk -v b="$bytes" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v r="$rss" 'BEGIN { c = t1 - t0; m = t2 - t1;
  printf "cp (same disk):  %.2f s  %.0f MB/s\n", c, b/c/1e6;
  printf "lynn merge:      %.2f s  %.0f MB/s  (%.0f%% of cp)  peak RSS %.0f MB\n", m, b/m/1e6, 100*c/m, r/1024 }'
rm -rf "$out"
