#!/usr/bin/env python3
"""gen_qv_fixtures.py - expected quant-verify quality checks from the original toolkit.

Runs quality_check() of the public eval/quant_verify.py (github.com/MerkyorLynn/
lynn-distill-toolkit, fetched outside this repository) on texts written here, with
each case's anchors put in place of the toolkit's prompt anchors. torch is stubbed
(the checks do not use it). Writes tests/fixtures/qv/quality.jsonl:
  {"text", "task", "anchors", "quality": <the toolkit's dict>}

  python3 tests/tools/gen_qv_fixtures.py [--oracle DIR]
"""
import importlib.util
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORACLE = Path("/work/oracles/lynn-distill-toolkit")

CASES = [
    ("MoE 模型每个 token 只激活少数专家,激活参数就是这些专家加上共享部分的参数量。", "moe", ["专家", "expert"]),
    ("def factorial(n):\n    return 1 if n <= 1 else n * factorial(n - 1)", "fact", ["def", "return"]),
    ("The average speed is 200 / 2.5 = 80 km/h.", "speed", ["80", "km"]),
    ("SELECT * FROM orders WHERE amount > 100;", "sql", ["select", "orders"]),
    ("Select * From Orders", "sql", ["SELECT", "orders"]),
    ("ok", "short", ["ok"]),
    ("       short      ", "short2", ["short"]),
    ("完全不相关的一段话,但是足够长也很通顺。", "miss", ["伞", "umbrella"]),
    ("明天带伞,可能下雨。Привет мир", "cyr", ["伞"]),
    ("明天带伞,可能下雨。Пр", "cyr2", ["伞"]),
    ("これは日本語のテキストです 伞", "kana", ["伞"]),
    ("안녕하세요 반갑습니다 伞伞伞", "hangul", ["伞"]),
    ("مرحبا بالعالم umbrella", "arabic", ["umbrella"]),
    ("broken \ufffd\ufffd\ufffd text with umbrella", "repl", ["umbrella"]),
    ("one \ufffd replacement in a long enough sentence about the umbrella and the rain today", "repl1", ["umbrella"]),
    ("upupup the model says umbrella", "gib1", ["umbrella"]),
    ("Print Stats now: umbrella", "gib2", ["umbrella"]),
    ("the the the umbrella", "rep_ngram", ["umbrella"]),
    ("abcabcabc umbrella", "rep_ngram2", ["umbrella"]),
    ("a b a b a b umbrella", "rep_ngram3", ["umbrella"]),
    ("umbrella!!!!!!", "rep_char", ["umbrella"]),
    ("umbrella!!!!! ok", "rep_char5", ["umbrella"]),
    ("哈哈哈哈哈哈 umbrella", "rep_cjk", ["umbrella"]),
    ("好的好的好的,带伞", "rep_cjk2", ["伞"]),
    ("🌧️🌂☔ umbrella ☔☔☔", "emoji", ["umbrella"]),
    ("Température élevée: prenez un parapluie (umbrella) demain", "latin1", ["umbrella"]),
    ("天气：明天有雨，记得带伞！", "fullwidth", ["伞"]),
    ("天气,明天有雨,记得带伞!「注意」《安全》", "punct", ["伞"]),
    ("Mixed 中文 and English with numbers 123 and umbrella.", "mixed", ["umbrella"]),
    ("\t\n  leading and trailing whitespace umbrella  \n", "ws", ["umbrella"]),
    ("line one\nline two\nline three umbrella", "lines", ["umbrella"]),
    ("x" * 5 + "y" * 5 + " umbrella", "runs", ["umbrella"]),
    ("ΑΒΓΔ greek letters umbrella", "greek", ["umbrella"]),
    ("KV cache 把已经算过的 key 和 value 存下来,解码时不必重算注意力。", "kv", ["cache", "Key"]),
    ("", "empty", ["x"]),
    ("##### ***** ##### umbrella", "symbols", ["umbrella"]),
    ("résumé résumé café umbrella", "accents", ["umbrella"]),
    ("aaaa bbbb cccc dddd umbrella", "four", ["umbrella"]),
    ("1212121 umbrella", "digits_rep", ["umbrella"]),
    ("Use matchCondition here for the umbrella", "gib3", ["umbrella"]),
]


def main():
    oracle = ORACLE
    if "--oracle" in sys.argv:
        oracle = Path(sys.argv[sys.argv.index("--oracle") + 1])
    torch = types.ModuleType("torch")
    torch.Tensor = object
    sys.modules["torch"] = torch
    spec = importlib.util.spec_from_file_location("quant_verify", oracle / "eval" / "quant_verify.py")
    q = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(q)
    out = ROOT / "tests" / "fixtures" / "qv" / "quality.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for text, task, anchors in CASES:
            q.PROMPT_ANCHORS = [(task, anchors)]
            res = q.quality_check(1, text)
            f.write(json.dumps({"text": text, "task": task, "anchors": anchors, "quality": res}, ensure_ascii=False) + "\n")
    print(f"wrote {out} ({len(CASES)} cases)", file=sys.stderr)


if __name__ == "__main__":
    main()
