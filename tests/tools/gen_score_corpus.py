#!/usr/bin/env python3
"""Deterministic corpus of (hyp, ref, prompt) pairs for the scorer tests.

Writes tests/fixtures/score/corpus.jsonl: at least 1,000 pairs in the
categories the issue lists (English, Chinese, mixed, code, empty, identical,
disjoint, very long, whitespace-only, punctuation-heavy) plus Markdown
structure, other scripts and cliché openings. No oracle is involved here;
gen_score_fixtures.py computes the expected values.
"""
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "score" / "corpus.jsonl"

EN = ("the cat sat on mat model expert experts layer weights quantized token tokens "
      "attention router gate running runs ran quickly happily generalization "
      "connection connected connecting relational conditional hopeful goodness "
      "a an of to in is was are were be been being have has had do does did "
      "train training trained evaluation evaluate evaluated score scores scoring "
      "python function return value values list dict string strings caresses ponies "
      "ties caress cats feed agreed plastered bled motoring sing conflated troubled "
      "sized hopping tanned falling hissing fizzed failing filing happy sky dying "
      "lying generously probabilistic mixture parameters active sparse dense").split()
ZH = list("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质模型专家参数激活量化训练评估")
ZH_PUNCT = list("，。、；：？！“”‘’（）《》「」…—")
CLICHES = ["I'd be happy to help", "Let me break this down", "As an AI", "I cannot",
           "好的,我来帮", "首先,让我", "当然可以,", "好的,", "当然,"]
PROMPTS = ["", "用 python 实现快速排序", "Write a SQL query for users older than 18",
           "请证明根号2是无理数", "北京到上海多远?", "把 1/3 转成小数", "Return the answer as JSON",
           "用 markdown 表格比较 RoPE 和 ALiBi", "今天北京适合穿什么?", "Explain MoE routing",
           "写一段 bash 脚本", "Please give 代码 for factorial", "Output JSON please",
           "Markdown 表格: 列出三种排序", "介绍一下量化"]
OTHER = ["Привет мир как дела", "Γειά σου κόσμε", "こんにちは世界、カタカナ", "안녕하세요 세계",
         "مرحبا بالعالم", "café naïve résumé façade", "Ünïcödé Ⅻ ﬁne ſtraße", "\u212aelvin \u0130stanbul",
         "１２３ full-width ＡＢＣ", "٣٤٥ arabic digits", "emoji 😀🚀✨ ok", "तमिழ् हिन्दी",
         "ﬀ ligature ǅ titlecase", "ΑΒΓ δεζ", "עברית טקסט"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for i in range(10):\n    print(i)\n",
    "SELECT name, age FROM users WHERE age > 18;",
    "```python\ndef fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\n```",
    "int main(void) { return 0; }",
    "const x = {a: 1, b: [2, 3]};",
    "#!/bin/bash\nfor f in *.txt; do echo \"$f\"; done",
    '{"name": "get_weather", "arguments": {"city": "Beijing"}}',
]


def en_sentence(r, n=None):
    n = n or r.randint(3, 25)
    words = [r.choice(EN) for _ in range(n)]
    if r.random() < 0.5:
        words[0] = words[0].capitalize()
    s = " ".join(words)
    return s + r.choice([".", "", "!", "?", " .", ",", ";"])


def zh_sentence(r, n=None):
    n = n or r.randint(4, 40)
    out = []
    for _ in range(n):
        out.append(r.choice(ZH) if r.random() > 0.12 else r.choice(ZH_PUNCT))
    return "".join(out)


def mixed(r):
    parts = []
    for _ in range(r.randint(2, 6)):
        k = r.random()
        if k < 0.4:
            parts.append(en_sentence(r, r.randint(2, 8)))
        elif k < 0.8:
            parts.append(zh_sentence(r, r.randint(3, 15)))
        else:
            parts.append(str(r.choice([2025, 3.14, 42, "12%", "1,234", "2025年", "3月", "0.50"])))
    return r.choice(["", " ", "\n"]).join(parts)


def perturb(r, s):
    """A noisy copy: substitutions, deletions, insertions, swaps (by code point)."""
    cs = list(s)
    for _ in range(r.randint(0, max(1, len(cs) // 6))):
        if not cs:
            break
        op = r.random()
        i = r.randrange(len(cs))
        if op < 0.3:
            cs[i] = r.choice(cs)
        elif op < 0.55:
            del cs[i]
        elif op < 0.8:
            cs.insert(i, r.choice(cs))
        else:
            j = r.randrange(len(cs))
            cs[i], cs[j] = cs[j], cs[i]
    return "".join(cs)


def perturb_words(r, s):
    ws = s.split(" ")
    for _ in range(r.randint(0, max(1, len(ws) // 3))):
        op = r.random()
        i = r.randrange(len(ws))
        if op < 0.4:
            ws[i] = r.choice(EN)
        elif op < 0.7 and len(ws) > 1:
            del ws[i]
        else:
            ws.insert(i, r.choice(EN))
    return " ".join(ws)


def markdown(r):
    lines = []
    for _ in range(r.randint(2, 12)):
        k = r.random()
        if k < 0.15:
            lines.append("#" * r.randint(1, 5) + r.choice([" ", "", "  "]) + en_sentence(r, 3))
        elif k < 0.25:
            lines.append(r.choice("一二三四五十") + r.choice("、.．") + zh_sentence(r, 5))
        elif k < 0.4:
            lines.append(r.choice(["- ", "* ", "+ ", "1. ", "2) ", "3、", "-", "10. "]) + mixed(r))
        elif k < 0.5:
            lines.append("| " + " | ".join(str(r.randint(0, 99)) for _ in range(r.randint(1, 4))) + " |")
        elif k < 0.6:
            lines.append("```")
        elif k < 0.7:
            lines.append("")
        elif k < 0.75:
            lines.append("  \t ")
        else:
            lines.append(mixed(r))
    return r.choice(["\n", "\r\n", "\n\n"]).join(lines)


def very_long(r):
    k = r.random()
    if k < 0.3:
        return " ".join(en_sentence(r) for _ in range(r.randint(80, 300)))
    if k < 0.6:
        return "".join(zh_sentence(r) for _ in range(r.randint(80, 300)))
    if k < 0.8:
        return "\n".join(markdown(r) for _ in range(r.randint(20, 60)))
    unit = mixed(r)
    return unit * r.randint(20, 120)


def punct_heavy(r):
    chars = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~，。！？、“”（）…—"
    out = []
    for _ in range(r.randint(1, 40)):
        if r.random() < 0.6:
            out.append(r.choice(chars))
        elif r.random() < 0.5:
            out.append(" ")
        else:
            out.append(r.choice(EN))
    return "".join(out)


def whitespace_only(r):
    return "".join(r.choice([" ", "\t", "\u3000", "\u00a0", "\u2003", "\x0b", "\x0c", "\u2028", "\x1c", "\x85"])
                   for _ in range(r.randint(0, 12)))


def repetitive(r):
    unit = r.choice([en_sentence(r, 3), zh_sentence(r, 4), "abcdefgh", "重复重复重复", "ok "])
    return r.choice(CLICHES + [""]) + " " + mixed(r) + unit * r.randint(3, 40)


def main():
    r = random.Random(20261130)
    pairs = []

    def add(cat, hyp, ref, prompt=None):
        pairs.append({"id": len(pairs), "cat": cat, "hyp": hyp, "ref": ref,
                      "prompt": prompt if prompt is not None else r.choice(PROMPTS)})

    add("basic", "The cat sat on the mat.", "The cat is sitting on the mat.", "")
    add("basic", "The quick brown dog jumps on the log.", "The quick brown fox jumps over the lazy dog", "")
    for _ in range(170):
        ref = " ".join(en_sentence(r) for _ in range(r.randint(1, 4)))
        add("english", perturb_words(r, ref) if r.random() < 0.6 else perturb(r, ref), ref)
    for _ in range(150):
        ref = zh_sentence(r)
        add("chinese", perturb(r, ref), ref)
    for _ in range(130):
        ref = mixed(r)
        add("mixed", perturb(r, ref), ref)
    for _ in range(60):
        ref = r.choice(CODE)
        add("code", perturb(r, ref) if r.random() < 0.7 else r.choice(CODE), ref)
    for _ in range(40):
        x = r.choice([en_sentence(r), zh_sentence(r), mixed(r)])
        add("empty", *r.choice([("", x), (x, ""), ("", "")]))
    for _ in range(50):
        x = r.choice([en_sentence(r), zh_sentence(r), mixed(r), markdown(r), r.choice(CODE)])
        add("identical", x, x)
    for _ in range(50):
        add("disjoint", r.choice([en_sentence(r), "12345 67890"]), r.choice([zh_sentence(r), "ΑΒΓ", "!!!"]))
    for _ in range(24):
        ref = very_long(r)
        add("very_long", perturb(r, ref[: r.randint(len(ref) // 2, len(ref))]) if r.random() < 0.7 else very_long(r), ref)
    for _ in range(40):
        add("whitespace", whitespace_only(r), r.choice([whitespace_only(r), en_sentence(r)]))
    for _ in range(60):
        ref = punct_heavy(r)
        add("punct", perturb(r, ref) if r.random() < 0.5 else punct_heavy(r), ref)
    for _ in range(90):
        ref = markdown(r)
        add("markdown", perturb(r, ref) if r.random() < 0.6 else markdown(r), ref)
    for _ in range(60):
        ref = r.choice(OTHER) + " " + r.choice(OTHER)
        add("scripts", perturb(r, ref), ref)
    for _ in range(60):
        ref = mixed(r) + markdown(r)
        hyp = repetitive(r) if r.random() < 0.5 else r.choice(CLICHES) + perturb(r, ref)
        add("style", hyp, ref)
    for _ in range(30):
        add("ws_heavy", "  ".join(en_sentence(r, 4).split()) + "\t\n", " \n " + en_sentence(r, 4))
    # two pairs longer than one 4,096-token block of the ROUGE-L LCS
    for _ in range(2):
        ref = " ".join(r.choice(EN[:60]) for _ in range(r.randint(4500, 5200)))
        add("block_long", perturb_words(r, ref), ref, "")
    assert len(pairs) >= 1000, len(pairs)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"wrote {len(pairs)} pairs to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
