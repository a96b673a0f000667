#!/usr/bin/python3
"""ncu_passes.py [--graphs] NCU_CSV - the decode passes of a CUDA runner trace
(`ncu --csv --metrics gpu__time_duration.sum`, tests/bench/runner_cuda_ncu.sh)
summed by kernel and grid: microseconds per pass, launches per pass, share.
A pass starts at each k_embed launch; the first (the prefill) is left out.
With --graphs (a trace taken with `--graph-profiling graph`), each graph
launch's time: the whole pass on the GPU, gaps between kernels included.
With --prefill (a trace of one long prompt, runner_cuda_prefill_ncu.sh),
every kernel of the trace summed by name: milliseconds, launches, share.
Lines that are not ncu's CSV (the command's own output) are skipped."""
import csv
import sys
from collections import defaultdict


def rows(path):
    with open(path, errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    return list(csv.DictReader(lines))


def main():
    if sys.argv[1] == "--graphs":
        us = [float(r["Metric Value"].replace(",", "")) / 1e3 for r in rows(sys.argv[2])
              if r.get("Metric Name") == "gpu__time_duration.sum"]
        print("graph launches (the first is the prefill), us: " + " ".join("%.1f" % u for u in us))
        return
    if sys.argv[1] == "--prefill":
        tot = defaultdict(float)
        cnt = defaultdict(int)
        for r in rows(sys.argv[2]):
            if r.get("Metric Name") == "gpu__time_duration.sum":
                name = r["Kernel Name"].split("(")[0].split("<")[0].replace("void ", "")
                tot[name] += float(r["Metric Value"].replace(",", ""))
                cnt[name] += 1
        allms = sum(tot.values()) / 1e6
        print("%.3f ms of kernels in %d launches" % (allms, sum(cnt.values())))
        print("%10s %8s %6s  %s" % ("ms", "launches", "share", "kernel"))
        for name in sorted(tot, key=lambda k: -tot[k]):
            print("%10.3f %8d %5.1f%%  %s" % (tot[name] / 1e6, cnt[name], 100 * tot[name] / 1e6 / allms, name))
        return
    passes = []
    for r in rows(sys.argv[1]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0].replace("void ", "")
        if name.startswith("k_embed") or not passes:
            passes.append([])
        ns = float(r["Metric Value"].replace(",", ""))
        passes[-1].append((name, r["Grid Size"], r["Block Size"], ns))
    dec = passes[1:]
    if not dec:
        sys.exit("ncu_passes: no decode pass in %s" % sys.argv[1])
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for p in dec:
        for name, grid, block, ns in p:
            tot[(name, grid, block)] += ns
            cnt[(name, grid, block)] += 1
    n = len(dec)
    allus = sum(tot.values()) / n / 1e3
    print("%d decode passes: %.1f us of kernels a pass, %.1f launches a pass" %
          (n, allus, sum(cnt.values()) / n))
    print("%10s %8s %6s  %s" % ("us/pass", "launches", "share", "kernel grid block"))
    for key in sorted(tot, key=lambda k: -tot[k]):
        us = tot[key] / n / 1e3
        print("%10.2f %8.1f %5.1f%%  %s %s %s" % (us, cnt[key] / n, 100 * us / allus, *key))


if __name__ == "__main__":
    main()
