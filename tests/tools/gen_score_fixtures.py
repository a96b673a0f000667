#!/usr/bin/env python3
"""Expected scores for tests/fixtures/score/corpus.jsonl, from the oracles.

  sacreBLEU 2.x source   (SACREBLEU_SRC, default /work/oracles/sacrebleu:
                          the public mjpost/sacrebleu repository; needs
                          Debian python3-regex python3-tabulate
                          python3-portalocker python3-colorama python3-lxml)
  Google rouge-score     (ROUGE_SRC, default /work/oracles/rouge: a folder
                          holding google-research's rouge/ package; the
                          stemmer is python3-nltk's PorterStemmer)
  Python difflib         (the interpreter's own)
  lynn-distill-toolkit   (TOOLKIT_SRC, default /work/oracles/toolkit: the
                          public MerkyorLynn/lynn-distill-toolkit; its
                          eval/four_gate_eval.py is imported with a stub
                          `torch` module, nothing else is replaced)

Run with /usr/bin/python3. Writes tests/fixtures/score/expected.jsonl (one
record per pair, same order) and expected_corpus.json (corpus chrF/chrF++).
Never edit the outputs by hand.
"""
import difflib
import json
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "score"
sys.path.insert(0, os.environ.get("SACREBLEU_SRC", "/work/oracles/sacrebleu"))
sys.path.insert(0, os.environ.get("ROUGE_SRC", "/work/oracles/rouge"))
sys.path.insert(0, os.path.join(os.environ.get("TOOLKIT_SRC", "/work/oracles/toolkit"), "eval"))
sys.modules.setdefault("torch", types.ModuleType("torch"))  # four_gate_eval imports it at top

from sacrebleu.metrics import CHRF  # noqa: E402
from rouge import rouge_scorer  # noqa: E402
import four_gate_eval as fge  # noqa: E402


def porter_words(path):
    """NLTK PorterStemmer().stem over roots × suffixes (the rouge-score stemmer)."""
    from nltk.stem import porter
    st = porter.PorterStemmer()
    roots = ["relat", "condit", "valen", "hesit", "digit", "conform", "radic", "differ", "vil",
             "analog", "vietnam", "predic", "oper", "feud", "decis", "hope", "call", "form",
             "sensit", "sensib", "tripl", "electr", "good", "reviv", "allow", "infer", "airlin",
             "gyroscop", "adjust", "defens", "irrit", "replac", "depend", "adopt", "homolog",
             "commun", "activ", "angular", "effect", "bowdler", "prob", "ceas", "controll", "roll",
             "cares", "pon", "ti", "caress", "cat", "fe", "agre", "plaster", "bl", "motor", "s",
             "conflat", "troubl", "siz", "hop", "tann", "fall", "hiss", "fizz", "fail", "fil",
             "happ", "sk", "d", "l", "t", "new", "inn", "out", "cann", "how", "proce", "exce",
             "succe", "general", "ration", "log", "geolog", "ful", "y", "spy", "enjoy", "toy",
             "syzyg", "tr", "ee", "tree", "oat", "iv", "orrer", "privat", "oaten", "x1", "abc9"]
    sufs = ["", "s", "es", "ies", "ied", "ed", "ing", "eed", "y", "ly", "ally", "ational",
            "tional", "enci", "anci", "izer", "abli", "bli", "alli", "entli", "eli", "ousli",
            "ization", "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti",
            "iviti", "biliti", "fulli", "logi", "icate", "ative", "alize", "iciti", "ical", "ful",
            "ness", "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment",
            "ent", "sion", "tion", "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize", "e",
            "ll", "sses", "ss", "ings", "ating", "izing", "ened", "ers", "ities"]
    words = sorted({r + s for r in roots for s in sufs if len(r + s) > 3} |
                   {"sky", "skies", "dying", "lying", "tying", "news", "innings", "outings",
                    "cannings", "howe", "proceed", "exceed", "succeed", "ies", "ied", "skying"})
    with open(path, "w") as f:
        for w in words:
            f.write(f"{w}\t{st.stem(w)}\n")


def main():
    pairs = [json.loads(l) for l in open(HERE / "corpus.jsonl", encoding="utf-8")]
    chrf = CHRF()
    chrfpp = CHRF(word_order=2)
    rl = rouge_scorer.RougeScorer(["rougeL"])
    rls = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    out = []
    for p in pairs:
        h, r, pr = p["hyp"], p["ref"], p["prompt"]
        s = rl.score(r, h)["rougeL"]
        ss = rls.score(r, h)["rougeL"]
        ref_sim = fge.reference_similarity_score(pr, h, r, "")
        rb = fge.score_rule_based(pr, h)
        out.append({
            "id": p["id"],
            "ascii": all(ord(c) < 128 for c in h + r),
            "chrf": chrf.sentence_score(h, [r]).score,
            "chrfpp": chrfpp.sentence_score(h, [r]).score,
            "rougeL": [s.precision, s.recall, s.fmeasure],
            "rougeL_stem": [ss.precision, ss.recall, ss.fmeasure],
            "seq_ratio": difflib.SequenceMatcher(None, h, r).ratio(),
            "seq_ratio_rev": difflib.SequenceMatcher(None, r, h).ratio(),
            "refsim": ref_sim,
            "style": {"rules": rb["rules"], "n_rule_pass": rb["n_rule_pass"],
                      "overall_pass": rb["overall_pass"]},
        })
    with open(HERE / "expected.jsonl", "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    hyps = [p["hyp"] for p in pairs]
    refs = [[p["ref"] for p in pairs]]
    corpus = {"chrf": chrf.corpus_score(hyps, refs).score,
              "chrfpp": chrfpp.corpus_score(hyps, refs).score,
              "n": len(pairs)}
    (HERE / "expected_corpus.json").write_text(json.dumps(corpus, indent=1) + "\n")
    porter_words(HERE / "porter.tsv")
    print(f"wrote expectations for {len(out)} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
