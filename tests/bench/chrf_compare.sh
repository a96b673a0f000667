#!/bin/sh
# chrf_compare.sh OLD_LIB [SEEDS] [N] - compare this build's chrF with another
# build's liblynn.a (e.g. one made from an older commit in a git worktree):
# every statistic and score bit on SEEDS x N random pairs (chrf_bits.c), then,
# when valgrind is installed, instructions per pair of lynn_chrf_sentence over
# the score corpus for chrF and chrF++, and of lynn_rouge_l (chrf_instr.c).
# Needs `make` first.
set -e
cd "$(dirname "$0")/../.."
OLD=$1
SEEDS=${2:-3}
N=${3:-100000}
[ -f "$OLD" ] && [ -f build/liblynn.a ] || { echo "usage: $0 OLD_LIB [SEEDS] [N] (after make)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
LIBS="$(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -pthread"
for v in old new; do
	lib=$OLD
	[ $v = new ] && lib=build/liblynn.a
	${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/chrf_bits.c "$lib" $LIBS -o "$T/bits_$v"
done
s=1
while [ $s -le "$SEEDS" ]; do
	"$T/bits_old" $s "$N" >"$T/old.txt"
	"$T/bits_new" $s "$N" >"$T/new.txt"
	if cmp -s "$T/old.txt" "$T/new.txt"; then echo "seed $s: $N pairs, identical"; else
		echo "seed $s: DIFFERENT"; diff "$T/old.txt" "$T/new.txt" | head -4; exit 1; fi
	s=$((s + 1))
done
command -v valgrind >/dev/null || { echo "valgrind not installed: no instruction counts"; exit 0; }
for v in old new; do
	lib=$OLD
	[ $v = new ] && lib=build/liblynn.a
	${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude $(pkg-config --cflags libcjson) tests/bench/chrf_instr.c \
		"$lib" $LIBS -o "$T/instr_$v"
	for mode in 0 2 rouge; do
		valgrind --tool=callgrind --callgrind-out-file="$T/cg" --collect-atstart=no \
			"$T/instr_$v" $mode 3 >"$T/out" 2>/dev/null
		n=$(sed 's/ pairs.*//' "$T/out")
		tot=$(callgrind_annotate "$T/cg" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | awk '{gsub(",","",$1); print $1}')
		label="word_order=$mode"
		[ $mode = rouge ] && label="ROUGE-L"
		echo "$v $label: $((tot / (3 * n))) instructions per pair"
	done
done
