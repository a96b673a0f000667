#!/usr/bin/env python3
"""Peers of bench_score.c on the same pairs: sacreBLEU CHRF().sentence_score
and rouge-score RougeScorer(["rougeL"]).score, single-threaded, pairs/s.
Oracle sources as in tests/tools/gen_score_fixtures.py (SACREBLEU_SRC,
ROUGE_SRC). Leaves out the "very_long" and "block_long" pairs unless --with-long."""
import json
import os
import sys
import time

sys.path.insert(0, os.environ.get("SACREBLEU_SRC", "/work/oracles/sacrebleu"))
sys.path.insert(0, os.environ.get("ROUGE_SRC", "/work/oracles/rouge"))
from sacrebleu.metrics import CHRF  # noqa: E402
from rouge import rouge_scorer  # noqa: E402

path = next((a for a in sys.argv[1:] if not a.startswith("--")), "tests/fixtures/score/corpus.jsonl")
with_long = "--with-long" in sys.argv
pairs = [json.loads(l) for l in open(path, encoding="utf-8")]
pairs = [(p["hyp"], p["ref"]) for p in pairs if with_long or p["cat"] not in ("very_long", "block_long")]


def bench(name, fn):
    best = 1e30
    for _ in range(3):
        t0 = time.process_time()
        for h, r in pairs:
            fn(h, r)
        best = min(best, time.process_time() - t0)
    print(f"{name:22s} {len(pairs):6d} pairs  {len(pairs) / best:10.0f} pairs/s")


c, cpp = CHRF(), CHRF(word_order=2)
rl = rouge_scorer.RougeScorer(["rougeL"])
bench("sacreBLEU chrF", lambda h, r: c.sentence_score(h, [r]).score)
bench("sacreBLEU chrF++", lambda h, r: cpp.sentence_score(h, [r]).score)
bench("rouge-score rougeL", lambda h, r: rl.score(r, h)["rougeL"].fmeasure)
