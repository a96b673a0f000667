#!/bin/sh
# batch_compare.sh OLD_LIB [MODEL_DIR] [RUNS] - the CPU runner's decode of
# 1, 2, 4 and 8 sequences (bench_runner) with another build's liblynn.a (e.g.
# one made from an older commit in a git worktree) against this build's,
# alternating old and new RUNS times (default 2) on the same model (default
# serve.sh's). Needs `make` first; the model is made by serve.sh.
set -e
cd "$(dirname "$0")/../.."
OLD=$1
DIR=${2:-/tmp/lynn-bench-serve}
RUNS=${3:-2}
[ -f "$OLD" ] && [ -f build/liblynn.a ] && [ -f "$DIR/model.safetensors" ] ||
	{ echo "usage: $0 OLD_LIB [MODEL_DIR] [RUNS] (after make and tests/bench/serve.sh)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
LIBS="$(pkg-config --libs libcjson libcurl libzstd openssl libmicrohttpd libpcre2-8 libutf8proc) -lm -pthread"
[ -d /usr/local/cuda/lib64 ] && LIBS="$LIBS -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcudart -lstdc++"
for v in old new; do
	lib=$OLD
	[ $v = new ] && lib=build/liblynn.a
	${CC:-cc} -O3 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/bench_runner.c "$lib" $LIBS -o "$T/runner_$v"
done
i=1
while [ $i -le "$RUNS" ]; do
	for v in old new; do
		"$T/runner_$v" "$DIR" 64 32 2 | sed "s/^/run $i $v: /" | sed 's/stream copy.*; decode/decode/'
	done
	i=$((i + 1))
done
