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


def grader_cases(tools_path, gold_path):
    """Tool-call and gold-answer cases graded by the toolkit's own functions."""
    import random
    r = random.Random(7)
    names = ["get_weather", "web_search", "stock_market", "Bash", "Read", "计算器", ""]
    hints = [{}, {"city": ["Beijing", "北京"]}, {"query": ["MoE", "experts"], "n": ["5"]},
             {"code": "ls"}, {"path": ["/tmp/x"]}]
    blocks = [
        '<tool_call>{{"name": "{n}", "arguments": {{"city": "Beijing"}}}}</tool_call>',
        '<tool_call>\n{{"name": "{n}", "arguments": {{"q": {{"deep": [1, 2]}}}}}}\n</tool_call>',
        '<tool_call> {{"name": "{n}"}} </tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{}}}} trailing</tool_call> x }}</tool_call>',
        '<tool_call>{{"name": {num}, "arguments": {{}}}}</tool_call>',
        '<tool_call>{{"name": "", "arguments": {{}}}}</tool_call>',
        '<tool_call>{{not json}}</tool_call>',
        '<tool_call>{{"name": "a", "name": "{n}"}}</tool_call>',
        '<tool_call>{{"name": "{n}"}}{{"x": 1}}</tool_call>',
        '{{"name": "{n}", "arguments": {{"city": "Beijing"}}}}',
        '{{ "name" : "{n}" , "arguments" : {{"a": {{"b": 1}}}} }}',
        '<tool_call>{{"name": "{n}", "arguments": {{"code": "line1\nline2"}}}}</tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{"x": NaN, "y": -Infinity}}}}</tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{"x": 01}}}}</tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{"s": "\\ud800"}}}}</tool_call>',
        '<tool_call>{{"name": "\\u0067et_weather", "arguments": {{}}}}</tool_call>',
        '<tool_call>{{"name": "{n}", "name": 0}}</tool_call>',
        '<tool_call>{{"name": 0, "name": "{n}"}}</tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{"a": [1, 2,]}}}}</tool_call>',
        '<tool_call>{{"name": "{n}"}} \n</tool_call>',
        '<tool_call>{{"name": "{n}", "arguments": {{"t": "tab\there"}}}}</tool_call>',
        'I will call {n} with Beijing.',
        'Use {n}.',
        'The weather in 北京 is sunny.',
        '',
    ]
    with open(tools_path, "w", encoding="utf-8") as f:
        for i in range(400):
            n = r.choice(names)
            parts = [r.choice(blocks).format(n=r.choice(names), num=r.choice([0, 1, 2.5]))
                     for _ in range(r.randint(1, 3))]
            out = r.choice(["", "Sure. ", "思考中…\n"]) + r.choice(["\n", " ", ""]).join(parts)
            exp = {"tool_name": n, "param_hints": r.choice(hints)}
            sc = fge.score_tool_call(out, exp)
            f.write(json.dumps({"output": out, "expected": exp,
                                "result": {"pass": sc["pass"], "via": sc["via"],
                                           "n_calls": len(sc.get("structured_calls", [])),
                                           "has_name": sc.get("has_name"),
                                           "has_param": sc.get("has_param")}},
                               ensure_ascii=False) + "\n")
    golds = ["42", " 42 ", "3.14", "\u3000北京\n", "x = 5", "", "Answer: B", 7, 2.5, 150]
    regexes = [r"\b42\b", r"^The", r"(?i)answer:\s*b", r"\d{3}", r"北京|上海", r"[A-D]\)",
               r"x\s*=\s*5", r"\$\d+(\.\d+)?", r"(?s)start.*end", r"\p{Han}{2}"]
    outs = ["The answer is 42.", "4242", "答案是北京。", "x=5", "Answer: b", "The cost is $3.14",
            "start\nmiddle\nend", "150 miles", "B) option", "", "π ≈ 3.14159", "It is 7 or 2.5"]
    with open(gold_path, "w", encoding="utf-8") as f:
        for i in range(300):
            out = r.choice(outs) + r.choice(["", " ", "\n" + r.choice(outs)])
            if r.random() < 0.5:
                rec = {"gold_answer": r.choice(golds), "verifier": r.choice(["string_match", "other", None])}
                if rec["verifier"] is None:
                    del rec["verifier"]
            else:
                rec = {"gold_answer": r.choice(regexes), "verifier": "regex"}
            try:
                sc = fge.score_string_match(out, rec)
            except Exception:  # a pattern Python rejects: not a comparable case
                continue
            f.write(json.dumps({"output": out, "gold": str(rec["gold_answer"]),
                                "verifier": rec.get("verifier"), "pass": sc["pass"]},
                               ensure_ascii=False) + "\n")


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
    grader_cases(HERE / "tools.jsonl", HERE / "gold.jsonl")
    print(f"wrote expectations for {len(out)} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
