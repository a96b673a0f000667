#!/usr/bin/python3
"""gen_tok_corpus.py - write the tokenizer test corpus, deterministically.

    /usr/bin/python3 tests/tools/gen_tok_corpus.py [OUT]   (default tests/fixtures/tok/corpus.b64)

One case per line, base64 of the case's bytes (cases hold newlines, NULs and
invalid UTF-8). The pieces below are our own text: English, Chinese and other
scripts, code, math and LaTeX, emoji and ZWJ sequences, combining marks in
decomposed form (NFC changes them), whitespace runs, tabs and CRLF, digits,
Qwen special tokens written inside text, and invalid UTF-8. Hand-written
cases come first, then seeded random combinations of the pieces.
tests/tools/gen_tok_fixtures.mjs turns the corpus into expected ids.
"""
import base64
import os
import random
import sys

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world", " Hello world", "Hello World!", "hello, world",
    "It's a truth universally acknowledged that tokenizers are subtle.",
    "I'LL be there; she'S sure we'RE late, THEY'VE said, you'D think I'M right.",
    "don't won't can't shouldn't y'all o'clock rock'n'roll",
    "We’re using curly quotes — and an em dash – and an ellipsis…",
    "Mr. Smith paid $1,234.56 for 3.5 kg of apples on 2024-02-29 at 10:30am.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2#frag",
    "ALL CAPS SENTENCE WITH NUMBERS 12345 AND SYMBOLS !!! ???",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier PascalCase",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "A sentence ending with spaces   ",
    "   leading spaces then text",
    "tabs\tbetween\twords\t\tand\t\t\tmore",
    "line one\nline two\n\nline four",
    "windows\r\nline\r\nendings\r\n",
    "mixed\r\n\r\n\n\rbreaks\r",
    "trailing newline\n",
    "\n\n\nleading newlines",
    "The year 1984 and the number 007 and 3.14159265358979",
    "Version v2.0.1-beta+build.7 released; see CHANGELOG.md §4.2",
    "Dr. Müller's café serves crème brûlée and jalapeño piñatas.",
    "naïve coöperation résumé façade Zoë Brontë",
]

CHINESE = [
    "你好，世界！",
    "今天天气很好，我们去公园散步吧。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "请把这段文字翻译成英文：“知识就是力量。”",
    "中文标点符号：，。！？；：、“”‘’（）《》【】……——",
    "数字与中文混合：2024年3月15日，共计1,234元。",
    "模型的参数量为350亿，激活参数约30亿。",
    "我爱北京天安门，天安门上太阳升。",
    "繁體中文：這是一個測試句子，包含繁體字。",
    "「引號」和『雙引號』在日文與中文中都很常見。",
    "全角字符：ＡＢＣ１２３！＠＃",
    "日本語のテキスト：東京は日本の首都です。ひらがなとカタカナ。",
    "한국어 텍스트: 안녕하세요, 세계! 반갑습니다.",
    "𠀀𠀁𠀂 are CJK Extension B characters",
]

OTHER_SCRIPTS = [
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε· αβγδε ΑΒΓΔΕ",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया, क्षत्रिय",
    "สวัสดีชาวโลก ภาษาไทย",
    "Xin chào thế giới, Tiếng Việt",
    "ሰላም ለዓለም",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    "Türkçe: çok güzel, İstanbul ıslak",
    "Straße Maß Fuß groß ß ẞ",
    "Ελληνικά με τόνους: άέήίόύώ ΐΰ",
]

CODE = [
    "def main():\n    print(\"hello\")\n    return 0\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "if x != y and not z:\n        raise ValueError(f\"bad {x!r}\")",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))",
    "$ ls -la /usr/bin | grep -E '^-rwx' > out.txt 2>&1",
    "git commit -m \"fix: handle\\tescapes\" && git push origin main",
    "    indented four\n        indented eight\n\t\ttwo tabs",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "<div class=\"row\"><span>&lt;tag&gt; &amp; entity</span></div>",
    "fn add(a: i32, b: i32) -> i32 { a + b } // rust",
    "#!/bin/sh\nset -eu\necho \"$HOME\" | tr a-z A-Z",
    "a==b!=c<=d>=e&&f||g<<h>>i->j::k...l",
    "0x7fffffff 0b1010 1e-9 6.02e23 .5 5. -0.0",
    "url = \"https://api.example.com/v1/chat/completions\"",
]

MATH = [
    "$\\frac{a}{b} + \\sqrt{x^2 + y^2}$",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "$$\\sum_{i=1}^{n} i^2 = \\frac{n(n+1)(2n+1)}{6}$$",
    "\\int_0^\\infty e^{-x^2} \\, dx = \\frac{\\sqrt{\\pi}}{2}",
    "∀x ∈ ℝ, ∃y ∈ ℕ: x < y ≤ x + 1",
    "x² + y² = z², H₂O, ½ + ¼ = ¾",
    "f(x) = 3x^3 - 2x + 7; f'(x) = 9x^2 - 2",
    "α + β = γ, Δt → 0, ∂f/∂x, ∇·E = ρ/ε₀",
    "\\mathbb{R}^n \\times \\mathcal{O}(n \\log n)",
    "1 + 1 = 2, 2 × 3 = 6, 10 ÷ 2 = 5, 7 − 3 = 4",
    "\\left( \\begin{matrix} 1 & 0 \\\\ 0 & 1 \\end{matrix} \\right)",
    "∮ ∯ ∰ ∱ ∲ ∳ ⊕ ⊗ ⊥ ∥ ≈ ≠ ≡ ≪ ≫",
]

EMOJI = [
    "😀😃😄😁", "👍👍🏽👍🏿", "👨\u200d👩\u200d👧\u200d👦 family",
    "🏳️\u200d🌈 flag", "🇯🇵🇺🇸🇩🇪 flags", "1️⃣ 2️⃣ #️⃣ keycaps",
    "❤️ ♥ ❤ hearts", "🧑\u200d💻 coder 👩🏾\u200d🚀 astronaut",
    "🦙.cpp and 🤗 transformers", "emoji🙂inside🙂words",
    "☕️ coffee ☕ ☀️ sun", "🫠🫡🫥 newer emoji",
]

# Decomposed forms: NFC composes these (é, ä, ñ, ...), so the normalizer matters.
COMBINING = [
    "e\u0301", "a\u0308", "n\u0303", "o\u0302", "u\u0308ber",
    "cafe\u0301 na\u0308ive", "Tie\u0302\u0301ng Vie\u0323\u0302t",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab",       # Hangul jamo -> syllables
    "\u212b \u2126 \u212a",                          # singletons -> Å Ω K
    "a\u0301\u0327 a\u0327\u0301",                   # canonical reordering
    "Z\u0351\u036b\u0343\u036a\u0302a\u0306\u0300l\u0310g\u0313o\u0352",  # zalgo
    "q\u0307\u0323 x\u0304\u0301",                   # no precomposed form
    "\u0915\u094d\u0937",                            # Devanagari virama
    "\u0627\u064e\u0644\u0652",                      # Arabic harakat
    "\u05e9\u05b8\u05c1",                            # Hebrew points
    "\u0e01\u0e34\u0e48",                            # Thai marks
    "\u304b\u3099 \u30cf\u309a",                     # kana voicing marks
    "A\u030a \u00c5",                                # Å two ways
    "\u0041\u0300\u0041\u0301\u0041\u0302",
    "\u1e9b\u0323",                                  # long s with dots
    "\u0301 leading combining mark",
    "x\u20d7 vector arrow",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
    " \n", "\n ", " \t \n", "\u00a0", "\u3000", "\u2003", "\u2028", "\u0085", "\ufeff",
    "\u200b", "\x0b", "\x0c", "\u202f", "\u205f", "\u1680",
    " " * 17, "\t" * 9, "\n" * 7, " \r\n \r\n ",
]

DIGITS = [
    "0", "7", "42", "123", "2024", "1234567890", "3.14159", "1,000,000", "-273.15",
    "٣٤٥", "۱۲۳", "१२३", "①②③", "ⅫⅣ", "１２３", "²³¹", "½¼", "0.000001",
    "+1 (555) 010-9999", "192.168.0.1", "12:34:56", "1e10",
]

SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<tool_response>\nok\n</tool_response>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    " <|im_end|> ",
    "a<|im_start|>b",
    "<|im_start", "im_end|>", "<|IM_END|>", "<<|im_end|>>", "<|im_end|",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|box_start|>(1,2),(3,4)<|box_end|>",
    "<|object_ref_start|>cat<|object_ref_end|>",
    "<|repo_name|>lynn<|file_sep|>src/main.c",
    "</think>", "<think></think>", "<think> </think>",
    "<|endoftext|>", "\n<|im_start|>system\nYou are helpful.<|im_end|>",
]

# Invalid UTF-8 (bytes); JS strings and Python "replace" turn each maximal
# invalid subpart into U+FFFD, and lynn does the same.
INVALID = [
    b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xe2\x82", b"\xe2\x82\x28", b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\x80", b"\x80\x80\x80",
    b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"abc\xffdef", b"\xc2", b"\xf8\x88\x80\x80\x80",
    b"caf\xe9", b"\xe4\xbd\xa0\xe5\xa5", b"\xef\xbf\xbd", b"<|im_end|>\xff<|im_end|>",
]

EXTRA = [
    "\x00", "a\x00b", "\ue000\uf8ff private use", "\uffff\ufffe nonchar", "\U0010ffff",
    "\U0001d400\U0001d401 math bold", "ℌℑℜ ﬁ ﬂ ligatures", "™ © ® ℃ ℉ № ℡",
    "…‥․", "«guillemets» ‹single›", "¿Qué? ¡Sí!", "x\u00adsoft\u00adhyphen",
]

POOLS = [ENGLISH, CHINESE, OTHER_SCRIPTS, CODE, MATH, EMOJI, COMBINING, WHITESPACE,
         DIGITS, SPECIAL, EXTRA]
SEPS = ["", " ", "  ", "\n", "\t", "\r\n", "\n\n", ", ", " \n", "\u3000"]


def b(x):
    return x if isinstance(x, bytes) else x.encode("utf-8")


def cases():
    out = []
    # every piece alone
    for pool in POOLS:
        out += [b(p) for p in pool]
    out += INVALID
    # every piece with a leading space and inside words
    for pool in (ENGLISH, CHINESE, COMBINING, DIGITS, EMOJI, SPECIAL):
        out += [b(" " + p) for p in pool]
        out += [b("x" + p + "y") for p in pool]
    # long inputs: a paragraph, runs of one character class
    out.append(b(" ".join(ENGLISH * 3)))
    out.append(b("".join(CHINESE)))
    out.append(b("a" * 3000))
    out.append(b(" " * 300 + "x"))
    out.append(b("\n" * 200))
    out.append(b("9" * 500))
    out.append(b("😀" * 200))
    out.append(b("e\u0301" * 300))
    out.append(b("ab" * 1000))
    rng = random.Random(20261130)
    while len(out) < 2200:
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.06:
                parts.append(rng.choice(INVALID))
            else:
                parts.append(b(rng.choice(rng.choice(POOLS))))
            parts.append(b(rng.choice(SEPS)))
        case = b"".join(parts)
        if rng.random() < 0.1:
            # cut at a random byte: may split a UTF-8 sequence
            case = case[: rng.randint(0, len(case))]
        out.append(case)
    return out


def main():
    dst = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "tok", "corpus.b64")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    cs = cases()
    with open(dst + ".tmp", "w") as f:
        for c in cs:
            f.write(base64.b64encode(c).decode("ascii") + "\n")
    os.replace(dst + ".tmp", dst)
    print(f"gen_tok_corpus: {len(cs)} cases, {sum(map(len, cs))} bytes -> {dst}")


if __name__ == "__main__":
    main()
