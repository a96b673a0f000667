#!/bin/sh
# bench_score_rounds.sh - chrF / chrF++ against sacreBLEU in alternating rounds,
# optionally with another build's bench_score in the same rounds (all see the
# same load: this VM's speed swings by up to 2x within seconds, so single
# figures mean little). One line a round, then medians and ranges of the
# per-round ratios.
#
#   sh tests/bench/bench_score_rounds.sh ROUNDS [OTHER_BENCH_SCORE]
#
# Needs build/bench_score (tests/bench/run.sh builds it) and the peers of
# tests/bench/bench_score_peers.py (SACREBLEU_SRC, ROUGE_SRC).
set -e
cd "$(dirname "$0")/../.."
rounds=${1:-23}
other=${2:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pps() { "$@" 2>/dev/null | awk '{print $5}'; }
echo "# time  chrF: other this | chrF++: other this | sacreBLEU chrF chrF++ (pairs/s)"
for r in $(seq "$rounds"); do
	oc=-; op=-
	[ -n "$other" ] && oc=$(pps "$other" --only chrF)
	nc=$(pps build/bench_score --only chrF)
	[ -n "$other" ] && op=$(pps "$other" --only chrF++)
	np=$(pps build/bench_score --only chrF++)
	pe=$(/usr/bin/python3 tests/bench/bench_score_peers.py 2>/dev/null |
		awk '/sacreBLEU chrF\+\+/{p=$5} /sacreBLEU chrF /{c=$5} END{print c, p}')
	echo "$(date -u +%H:%M:%S) $oc $nc $op $np $pe" | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def col(i): return [float(r[i]) if r[i] != "-" else None for r in rows]
oc, nc, op, np_, pc, pp = (col(i) for i in range(1, 7))
def show(name, xs, fmt="%.1f"):
    xs = [x for x in xs if x is not None]
    if xs:
        print("%-28s median " % name + fmt % st.median(xs) + "  range " + fmt % min(xs) + "-" + fmt % max(xs))
show("chrF this (pairs/s)", nc, "%.0f"); show("chrF++ this (pairs/s)", np_, "%.0f")
show("sacreBLEU chrF (pairs/s)", pc, "%.0f"); show("sacreBLEU chrF++ (pairs/s)", pp, "%.0f")
show("chrF this / sacreBLEU", [a / b for a, b in zip(nc, pc)])
show("chrF++ this / sacreBLEU", [a / b for a, b in zip(np_, pp)])
if oc[0] is not None:
    show("chrF other (pairs/s)", oc, "%.0f"); show("chrF++ other (pairs/s)", op, "%.0f")
    show("chrF other / sacreBLEU", [a / b for a, b in zip(oc, pc)])
    show("chrF++ other / sacreBLEU", [a / b for a, b in zip(op, pp)])
    show("chrF this / other", [a / b for a, b in zip(nc, oc)], "%.3f")
    show("chrF++ this / other", [a / b for a, b in zip(np_, op)], "%.3f")
EOF
