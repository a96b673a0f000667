#!/usr/bin/env python3
"""gen_eval_fixtures.py - expected lynn-4gate-v1 reports from the original toolkit.

The oracle is the public four_gate_eval.py of github.com/MerkyorLynn/lynn-distill-toolkit
(fetched outside this repository, e.g. /work/oracles/lynn-distill-toolkit). It is run
as is: its main() with its own argument parsing, prompt loading, gate runners,
verdict and report writer. Only the model is replaced: torch / transformers / peft
are stubbed, and its generate() returns the scripted outputs of this file for the
active side (adapter on = candidate, adapter disabled = baseline). The same scripted
outputs are what tests/check_eval.c's scripted endpoint serves to `lynn eval`.

Writes tests/fixtures/eval/:
  prompts/           a small bilingual prompt dir (style, v8 x3, v9 x2) written here
  <scenario>/canned.json     {"cand": {prompt: output}, "base": {...},
                              "max_tokens": {prompt: n}} (max_tokens as the oracle asked)
  <scenario>/expected.json   the oracle's report
  <scenario>/args.json       sanity arguments used

  python3 tests/tools/gen_eval_fixtures.py [--oracle DIR]
"""
import contextlib
import io
import importlib.util
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "eval"
ORACLE = Path("/work/oracles/lynn-distill-toolkit")

# ---- the prompt sets ---------------------------------------------------------

STYLE = [
    {"id": "t_001", "category": "research_long", "prompt": "请对「家用储能电池的经济性」做调研,分章节给出数据。",
     "reference_output": "## 一、背景\n储能电池成本在 2024 年降到每千瓦时约 700 元。\n\n## 二、收益\n- 峰谷价差套利\n- 光伏自用\n\n## 三、结论\n在峰谷价差超过 0.7 元的地区,回收期约 8 年。"},
    {"id": "t_002", "category": "math_algo", "prompt": "用 Python 实现斐波那契数列的迭代版本。",
     "reference_output": "```python\ndef fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n```\n迭代版本的时间复杂度是 O(n),空间复杂度 O(1)。"},
    {"id": "t_003", "category": "math_algo", "prompt": "证明:两个奇数的和是偶数。",
     "reference_output": "设两个奇数为 2a+1 和 2b+1,其和为 2a+2b+2 = 2(a+b+1),是 2 的倍数,所以是偶数。证毕。"},
    {"id": "t_004", "category": "general_qa", "prompt": "Give a JSON object for a city with name and population fields, for Paris.",
     "reference_output": "{\"name\": \"Paris\", \"population\": 2102650}\n\nThe population figure is the 2023 census estimate for the city proper."},
    {"id": "t_005", "category": "general_qa", "prompt": "用 markdown 表格比较 HTTP/1.1 和 HTTP/2。",
     "reference_output": "| 特性 | HTTP/1.1 | HTTP/2 |\n|---|---|---|\n| 多路复用 | 否 | 是 |\n| 头部压缩 | 否 | HPACK |\n| 传输格式 | 文本 | 二进制帧 |"},
    {"id": "t_006", "category": "tech_holdout", "prompt": "Why do mixture-of-experts models need a router?",
     "reference_output": "A router decides which experts process each token. Without it every expert would run on every token, and the model would cost as much as a dense model of the same total size. With top-8 routing over 256 experts, only about 3% of expert weights are used per token."},
    {"id": "t_007", "category": "general_qa", "prompt": "简单解释一下什么是复利。"},
    {"id": "t_008", "category": "research_long", "prompt": "Write a research note on heat pumps in cold climates."},
]

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
SEARCH = {"type": "function", "function": {"name": "web_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
SHELL = {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}

V8 = {
    "stage1_tool_calling.jsonl": [
        {"id": "s1_a", "prompt": "杭州今天天气怎么样?", "tools": [WEATHER, SEARCH], "expected": {"tool_name": "get_weather", "param_hints": {"city": ["杭州", "Hangzhou"]}}},
        {"id": "s1_b", "prompt": "Search the web for the 2024 Olympics medal table.", "tools": [SEARCH], "expected": {"tool_name": "web_search", "param_hints": {"query": ["Olympics"]}}},
        {"id": "s1_c", "prompt": "What's the weather in Oslo?", "tools": [WEATHER], "expected": {"tool_name": "get_weather", "param_hints": {"city": ["Oslo"]}}},
    ],
    "stage4_research.jsonl": [
        {"id": "s4_a", "prompt": "调研一下钠离子电池的最新进展,先搜索。", "tools": [SEARCH], "expected": {"tool_name": "web_search", "param_hints": {"query": ["钠离子"]}}},
    ],
    "stage5_coding.jsonl": [
        {"id": "s5_a", "prompt": "Run the test suite with make test.", "tools": [SHELL], "expected": {"tool_name": "run_shell", "param_hints": {"cmd": ["make test"]}}},
    ],
}

V9 = {
    "v9_holdout.jsonl": [
        {"id": "h_a", "prompt": "1 到 100 的整数之和是多少?", "gold_answer": "5050", "verifier": "string_match"},
        {"id": "h_b", "problem": "What is 12 factorial divided by 10 factorial?", "gold_answer": 132, "verifier": "string_match"},
    ],
    "v9_probe_expanded.jsonl": [
        {"id": "p_a", "prompt": "A car travels 150 km in 2.5 hours. Average speed in km/h?", "gold_answer": "(?<![0-9.])60(?![0-9])", "verifier": "regex"},
        {"id": "p_b", "user": "本金 1000 元,年利率 10%,复利 2 年后本息合计多少元?", "gold_answer": "1210", "verifier": "string_match"},
        {"id": "p_c", "prompt": "Describe the water cycle in two sentences."},
    ],
}


def text_of(rec):
    return rec.get("prompt") or rec.get("user") or rec.get("problem") or ""


def call(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


GOOD_NOREF = {
    "t_007": "复利就是利滚利:每一期的利息加入本金,下一期按新的本金计算利息。比如 1000 元按 5% 年利率复利 2 年,得到 1102.5 元,而单利只有 1100 元。",
    "t_008": "## Heat pumps in cold climates\n\nModern cold-climate air-source heat pumps keep a coefficient of performance above 2 at -15 C.\n\n- Sizing matters more than in mild climates\n- Backup resistance heat covers the coldest hours\n\nIn most of Europe and North America they now beat gas boilers on running cost.",
}

UNRELATED = [
    "Thank you for the question. There are many aspects to consider, and the answer depends on several factors that vary by situation and context.",
    "这个问题涉及很多方面,需要综合考虑各种因素,具体情况具体分析,无法一概而论,建议参考更多资料后再做判断。",
]


def style_outputs(kind):
    cand, base = {}, {}
    for i, r in enumerate(STYLE):
        p = r["prompt"]
        ref = r.get("reference_output")
        good = ref + "\n\n以上是简要说明。" if ref else GOOD_NOREF[r["id"]]
        weak = UNRELATED[i % 2]
        if kind == "net_win":
            cand[p], base[p] = good, weak
        elif kind == "abort_style":
            # clichéd openings and degenerate tails on the candidate
            cand[p] = ("好的," + good) if i % 2 == 0 else ("As an AI, " + "ok ok ok ok " * 30)
            base[p] = weak
        elif kind == "abort_net":
            cand[p], base[p] = good, good  # no difference: ties everywhere
        elif kind == "mixed":
            # some wins, some losses, some close calls, a garbage output
            if i in (0, 1):
                cand[p], base[p] = good, weak
            elif i == 2:
                cand[p], base[p] = weak, good
            elif i == 3:
                cand[p], base[p] = good, good + " Also note."
            elif i == 4:
                cand[p], base[p] = "▓▒░" * 40 + good[:20], good
            else:
                cand[p], base[p] = good, ("I'd be happy to help! " + good if i == 6 else weak)
    return cand, base


def v8_outputs(kind):
    cand, base = {}, {}
    for fname, recs in V8.items():
        for j, r in enumerate(recs):
            exp = r["expected"]
            hint_key = next(iter(exp["param_hints"]))
            right = call(exp["tool_name"], {hint_key: exp["param_hints"][hint_key][0]})
            if kind == "abort_regress" and r["id"] in ("s1_a", "s1_b"):
                cand[text_of(r)] = call("wrong_tool", {"x": 1})          # structured mismatch
            elif kind == "mixed" and r["id"] == "s1_c":
                cand[text_of(r)] = "I would call get_weather with city Oslo."  # substring fallback
            elif kind == "mixed" and r["id"] == "s4_a":
                cand[text_of(r)] = 'Calling {"name": "web_search", "arguments": {"query": "钠离子电池"}} now.'
            else:
                cand[text_of(r)] = right
            base[text_of(r)] = right if r["id"] != "s5_a" else "make test"
    return cand, base


def v9_outputs(kind):
    cand, base = {}, {}
    answers = {"h_a": "答案是 5050。", "h_b": "12!/10! = 12 × 11 = 132.", "p_a": "The average speed is 60 km/h.",
               "p_b": "本息合计 1210 元。", "p_c": "Water evaporates from oceans and lakes, condenses into clouds, and falls back as rain or snow that flows into rivers and the sea again."}
    for fname, recs in V9.items():
        for r in recs:
            a = answers[r["id"]]
            if kind == "abort_regress" and r["id"] in ("h_a", "p_a"):
                cand[text_of(r)] = "The answer is 600 or so." if r["id"] == "p_a" else "答案是 5000。"
            elif kind == "mixed" and r["id"] == "p_a":
                cand[text_of(r)] = "The average speed is 160 km/h."
            else:
                cand[text_of(r)] = a
            base[text_of(r)] = a
    return cand, base


SCENARIOS = {
    # name: (outputs kind, sanity mode)
    "net_win": ("net_win", "json_pass"),
    "abort_style": ("abort_style", "json_pass"),
    "abort_regress": ("abort_regress", "flag"),
    "abort_net": ("abort_net", "flag"),
    "mixed": ("mixed", "flag"),
    "missing_sanity": ("net_win", "json_missing"),
    "implicit_sanity": ("net_win", "none"),
    "sanity_fail": ("net_win", "json_fail"),
}


def outputs_for(kind):
    c, b = {}, {}
    for f in (style_outputs, v8_outputs, v9_outputs):
        # v8/v9 are unchanged by the style-only kinds
        if f is style_outputs:
            k = kind if kind in ("net_win", "abort_style", "abort_net", "mixed") else "net_win"
        else:
            k = kind if kind in ("abort_regress", "mixed") else "net_win"
        fc, fb = f(k)
        c.update(fc)
        b.update(fb)
    return c, b


def write_prompts(d):
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "v4_distill_verify_35_v2.jsonl", "w", encoding="utf-8") as f:
        for r in STYLE:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    for sets in (V8, V9):
        for name, recs in sets.items():
            with open(d / name, "w", encoding="utf-8") as f:
                for r in recs:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")


# ---- running the oracle --------------------------------------------------------

class FakeModel:
    def __init__(self):
        self.adapter_on = True
        self.device = "cpu"

    def set_adapter(self, name):
        self.adapter_on = True

    @contextlib.contextmanager
    def disable_adapter(self):
        self.adapter_on = False
        try:
            yield
        finally:
            self.adapter_on = True

    def eval(self):
        return self


def load_oracle(oracle_dir):
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16 = "bf16", "f16"
    torch.inference_mode = contextlib.nullcontext
    sys.modules["torch"] = torch
    spec = importlib.util.spec_from_file_location("four_gate_eval", oracle_dir / "eval" / "four_gate_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_oracle(mod, prompts_dir, cand, base, sanity_args, tmp):
    model = FakeModel()
    asked = {}

    def fake_generate(_model, _tok, prompt, max_new=384, tools=None):
        asked.setdefault(prompt, max_new)
        assert asked[prompt] == max_new
        table = cand if model.adapter_on else base
        return table[prompt].strip()

    tf = types.ModuleType("transformers")
    tf.AutoModelForImageTextToText = types.SimpleNamespace(from_pretrained=lambda *a, **k: model)
    tf.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: object())
    peft = types.ModuleType("peft")
    peft.PeftModel = types.SimpleNamespace(from_pretrained=lambda *a, **k: model)
    sys.modules["transformers"], sys.modules["peft"] = tf, peft
    mod.generate = fake_generate

    basedir, adir, out = tmp / "base", tmp / "adapter", tmp / "out"
    for d in (basedir, adir, out):
        d.mkdir(parents=True, exist_ok=True)
    (basedir / "config.json").write_text("{}")
    (adir / "adapter_config.json").write_text("{}")
    argv = ["four_gate_eval.py", "--base", str(basedir), "--adapter", str(adir), "--model-tag", "fixture",
            "--runner", "remote", "--prompts-dir", str(prompts_dir), "--out-dir", str(out)] + sanity_args
    old = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            rc = mod.main()
    finally:
        sys.argv = old
    report = json.loads((out / "4gate_results.json").read_text(encoding="utf-8"))
    return rc, report, asked


def main():
    oracle = ORACLE
    if "--oracle" in sys.argv:
        oracle = Path(sys.argv[sys.argv.index("--oracle") + 1])
    mod = load_oracle(oracle)
    if OUT.exists():
        shutil.rmtree(OUT)
    write_prompts(OUT / "prompts")
    (OUT / "sanity_pass.json").write_text(json.dumps({"schema_version": "lynn-diff-sanity-v1", "pass": True, "n_pass": 5, "n_total": 5}) + "\n")
    (OUT / "sanity_fail.json").write_text(json.dumps({"schema_version": "lynn-diff-sanity-v1", "pass": False, "n_pass": 3, "n_total": 5}) + "\n")
    for name, (kind, sanity) in SCENARIOS.items():
        d = OUT / name
        d.mkdir(parents=True)
        cand, base = outputs_for(kind)
        # the sanity file path is given relative to the repo root, as the C test runs there
        rel = {"json_pass": "tests/fixtures/eval/sanity_pass.json", "json_fail": "tests/fixtures/eval/sanity_fail.json",
               "json_missing": "tests/fixtures/eval/no_such_sanity.json"}.get(sanity)
        sargs = ["--sanity-json", str(ROOT / rel)] if rel else (["--sanity-pass"] if sanity == "flag" else [])
        with tempfile.TemporaryDirectory() as t:
            rc, rep, asked = run_oracle(mod, OUT / "prompts", cand, base, sargs, Path(t))
        largs = ["--sanity-json", rel] if rel else (["--sanity-pass"] if sanity == "flag" else [])
        (d / "canned.json").write_text(json.dumps({"cand": cand, "base": base, "max_tokens": asked}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        (d / "expected.json").write_text(json.dumps(rep, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        (d / "args.json").write_text(json.dumps({"args": largs}) + "\n")
        print(f"{name}: verdict={rep['verdict']} net_score={rep['net_score']} reasons={rep['hard_fail_reasons']}", file=sys.stderr)


if __name__ == "__main__":
    main()
