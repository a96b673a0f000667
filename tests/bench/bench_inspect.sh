#!/bin/sh
# bench_inspect.sh - `lynn inspect` on a 70 GB sharded checkpoint made of
# sparse files (headers only are read), and reading tensor data through lynn's
# reader vs dd on a real file, page cache cold (evicted with fadvise through
# dd iflag=nocache) and warm. Figures: docs/benchmarks.md, section "st".
#
#   sh tests/bench/bench_inspect.sh        (from the repo root, after make)
# LYNN_BENCH_DIR: scratch folder (default: a temp folder, removed after);
# LYNN_BENCH_READ_GB: size of the real file for the read test (default 4).
set -e
cd "$(dirname "$0")/../.."
GB=${LYNN_BENCH_READ_GB:-4}
DIR=${LYNN_BENCH_DIR:-$(mktemp -d /tmp/lynn-bench-st.XXXXXX)}
trap 'rm -rf "$DIR/sparse" "$DIR/real.safetensors" "$DIR/bench_st_read"; [ -n "$LYNN_BENCH_DIR" ] || rmdir "$DIR"' EXIT
mkdir -p "$DIR"

ms() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== st: sparse Qwen3.6-35B-A3B-shaped checkpoint"
/usr/bin/python3 tests/bench/mk_sparse_ckpt.py "$DIR/sparse"
echo "apparent $(du -sh --apparent-size "$DIR/sparse" | cut -f1), on disk $(du -sh "$DIR/sparse" | cut -f1)"
./lynn inspect "$DIR/sparse" > /dev/null
for args in "" "--json --tensors"; do
	t=$(for i in 1 2 3 4 5 6 7 8 9; do
		a=$(ms); ./lynn inspect $args "$DIR/sparse" > /dev/null; b=$(ms)
		echo $(( (b - a) / 1000 ))
	done | median)
	echo "lynn inspect $args: median of 9 = $t us"
done
# peer: Python reading the same headers with json (what safe_open does first)
t=$(for i in 1 2 3; do
	a=$(ms)
	/usr/bin/python3 -c '
import json, os, struct, sys
d = sys.argv[1]; n = 0
for f in sorted(os.listdir(d)):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            h = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        n += len(h) - 1
' "$DIR/sparse"
	b=$(ms); echo $(( (b - a) / 1000 ))
done | median)
echo "peer python3 json header read: median of 3 = $t us"

echo "== st: reading tensor data, $GB GiB file"
cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude tests/bench/bench_st_read.c build/liblynn.a \
	$(pkg-config --libs libcjson) -lm -o "$DIR/bench_st_read"
/usr/bin/python3 -c '
import json, struct, sys
n = int(sys.argv[2]) << 30
h = {"__metadata__": {"format": "pt"}, "data": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}
b = json.dumps(h, separators=(",", ":")).encode(); b += b" " * (-len(b) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(b)) + b)' "$DIR/real.safetensors" "$GB"
dd if=/dev/zero bs=16M count=$((GB * 64)) status=none >> "$DIR/real.safetensors"
sync
F="$DIR/real.safetensors"
evict() { dd if="$F" iflag=nocache count=0 status=none; }
for mode in cold warm; do
	for r in 1 2 3; do
		[ $mode = cold ] && evict
		echo "lynn $mode: $("$DIR/bench_st_read" "$F")"
		[ $mode = cold ] && evict
		echo "dd   $mode: $(dd if="$F" of=/dev/null bs=16M 2>&1 | tail -1)"
	done
done
