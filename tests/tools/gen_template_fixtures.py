#!/usr/bin/python3
"""Render chat templates with Jinja2 the way transformers does and store the outputs as fixtures.

Oracle: Debian python3-jinja2 with ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), tojson = json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now
globals (transformers' chat_template_utils). Usage:

    /usr/bin/python3 tests/tools/gen_template_fixtures.py [TEMPLATES_DIR]

TEMPLATES_DIR defaults to /work/oracles/llama.cpp/models/templates; the templates are copied into
tests/fixtures/templates/ (MIT-licensed test data of llama.cpp, see NOTICE). Writes:
  tests/fixtures/templates/conversations.txt    the conversation names (one a line, after a comment line)
  tests/fixtures/templates/conversations/NAME.{messages,tools,kwargs}.json   the inputs
  tests/fixtures/templates/expected/<template>/<conversation>.txt   rendered text, or
  tests/fixtures/templates/expected/<template>/<conversation>.err   Jinja2's error message
Also renders tests/fixtures/chat_template_qwen35.jinja (lynn's own template) as template "lynn-qwen35".
"""
import json, os, shutil, sys, datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(ROOT, "tests", "fixtures", "templates")

FIXED_NOW = datetime.datetime(2026, 1, 2, 3, 4, 5)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "days": {"type": "integer", "description": "Forecast days"},
        "metric": {"type": "boolean"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web; returns results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "number"},
        "filters": {"type": "object", "properties": {"lang": {"type": "string"}}},
        "sites": {"type": "array", "items": {"type": "string"}},
        "cursor": {"type": ["string", "null"]}},
        "required": ["query"]}}}
TOOLS = [WEATHER, SEARCH]


def call(cid, name, args, as_string=False):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


CONVERSATIONS = [
    {"name": "01-single-user", "messages": [{"role": "user", "content": "Hello!"}], "kwargs": {}},
    {"name": "02-system-user", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"}], "kwargs": {}},
    {"name": "03-multi-turn", "messages": [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nA short one."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"}], "kwargs": {}},
    {"name": "04-thinking-off", "messages": [
        {"role": "user", "content": "Translate 'chat' to French."}], "kwargs": {"enable_thinking": False}},
    {"name": "05-thinking-on", "messages": [
        {"role": "user", "content": "Translate 'chat' to French."}], "kwargs": {"enable_thinking": True}},
    {"name": "06-tools-no-call", "messages": [
        {"role": "system", "content": "You can use tools."},
        {"role": "user", "content": "What's the weather in Paris?"}], "tools": TOOLS, "kwargs": {}},
    {"name": "07-tool-call-string-number", "messages": [
        {"role": "user", "content": "Weather in Paris for 3 days?"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "days": 3})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5°C and clear in Paris."},
        {"role": "user", "content": "Thanks"}], "tools": TOOLS, "kwargs": {}},
    {"name": "08-tool-call-bool-null-float", "messages": [
        {"role": "system", "content": "Use metric units."},
        {"role": "user", "content": "Search for \"rust\" news"},
        {"role": "assistant", "content": "Let me look that up.", "tool_calls": [
            call("c1", "get_weather", {"city": "Zürich", "metric": True, "days": 1.5}),
            call("c2", "search", {"query": "rust \"news\"", "cursor": None, "limit": 1e-05})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "[1, 2]"}], "tools": TOOLS,
        "kwargs": {"add_generation_prompt": True}},
    {"name": "09-tool-call-object-array", "messages": [
        {"role": "user", "content": "Find docs in English on two sites"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("c9", "search", {"query": "docs", "filters": {"lang": "en", "n": [1, 2.0]},
                                  "sites": ["a.com", "b.org"], "limit": 100.0})]},
        {"role": "tool", "tool_call_id": "c9", "content": "nothing found"},
        {"role": "assistant", "content": "Nothing found."},
        {"role": "user", "content": "ok"}], "tools": TOOLS, "kwargs": {}},
    {"name": "10-arguments-as-string", "messages": [
        {"role": "user", "content": "Weather in Oslo"},
        {"role": "assistant", "content": "", "tool_calls": [call("c3", "get_weather", {"city": "Oslo", "metric": False}, True)]},
        {"role": "tool", "tool_call_id": "c3", "content": "cold"},
        {"role": "user", "content": "And tomorrow?"}], "tools": TOOLS, "kwargs": {}},
    {"name": "11-reasoning-content", "messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes, 17 is prime.", "reasoning_content": "17 has no divisors other than 1 and 17."},
        {"role": "user", "content": "And 21?"},
        {"role": "assistant", "content": "No: 21 = 3 × 7.", "reasoning_content": "\n21 = 3*7.\n"}], "kwargs": {"add_generation_prompt": False}},
    {"name": "12-think-in-content", "messages": [
        {"role": "system", "content": "Think step by step."},
        {"role": "user", "content": "2*3?"},
        {"role": "assistant", "content": "<think>\nmultiply\n</think>\n\n6"},
        {"role": "user", "content": "3*3?"}], "kwargs": {"enable_thinking": True}},
    {"name": "13-list-content", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "System in parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]}],
        "kwargs": {}},
    {"name": "14-unicode-escapes", "messages": [
        {"role": "user", "content": "Quote: \"hi\" \\ tab\there 日本語 ✓\u0001"},
        {"role": "assistant", "content": "", "tool_calls": [call("u1", "search", {"query": "日本語 \"q\"\n\\", "limit": -2})]},
        {"role": "tool", "tool_call_id": "u1", "content": "<tool_response>x</tool_response>"},
        {"role": "assistant", "content": "done"}], "tools": TOOLS, "kwargs": {"enable_thinking": False}},
    {"name": "15-tool-then-generation-thinking-off", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "need tool", "tool_calls": [
            call("w", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "w", "content": "hot"}], "tools": TOOLS,
        "kwargs": {"enable_thinking": False}},
    {"name": "16-no-generation-prompt", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}], "kwargs": {"add_generation_prompt": False}},
    {"name": "17-simple-tool", "messages": [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Weather in Lisbon, 2 days, metric?"},
        {"role": "assistant", "content": "", "tool_calls": [call("s1", "get_weather", {"city": "Lisbon", "days": 2, "metric": True})]},
        {"role": "tool", "tool_call_id": "s1", "name": "get_weather", "content": "mild"},
        {"role": "assistant", "content": "Mild in Lisbon."},
        {"role": "user", "content": "Thanks!"}], "tools": [WEATHER], "kwargs": {"enable_thinking": False}},
]

BOS = "<s>"
EOS = "</s>"


def context(conv):
    # transformers' render_jinja_template: render(messages=, tools=, documents=, add_generation_prompt=,
    # **template_kwargs) with the special tokens among the kwargs; tools and documents are None when absent.
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": True, "bos_token": BOS, "eos_token": EOS}
    ctx.update(conv.get("kwargs", {}))
    return ctx


def gen_cases(env):
    """Small templates pinning Python/Jinja2 semantics -> tests/fixtures/jinja_cases.json."""
    sys.path.insert(0, HERE)
    from jinja_cases import CASES
    out = []
    for name, text, ctx in CASES:
        case = {"name": name, "template": text, "context": json.dumps(ctx, ensure_ascii=False)}
        try:
            case["output"] = env.from_string(text).render(**ctx)
        except Exception as e:
            case["error"] = "%s: %s" % (type(e).__name__, e)
        out.append(case)
    with open(os.path.join(ROOT, "tests", "fixtures", "jinja_cases.json"), "w", encoding="utf-8") as fp:
        json.dump(out, fp, ensure_ascii=False, indent=1)
        fp.write("\n")
    print("semantic cases: %d (%d errors)" % (len(out), sum("error" in c for c in out)))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/work/oracles/llama.cpp/models/templates"
    os.makedirs(FIX, exist_ok=True)
    names = sorted(f for f in os.listdir(src) if f.endswith(".jinja"))
    for f in names:
        shutil.copyfile(os.path.join(src, f), os.path.join(FIX, f))
    lic = os.path.join(src, "..", "..", "LICENSE")
    if os.path.exists(lic):
        shutil.copyfile(lic, os.path.join(FIX, "LICENSE.llama.cpp"))
    own = os.path.join(ROOT, "tests", "fixtures", "chat_template_qwen35.jinja")
    jobs = [(f[:-len(".jinja")], os.path.join(FIX, f)) for f in names] + [("lynn-qwen35", own)]
    conv_dir = os.path.join(FIX, "conversations")
    shutil.rmtree(conv_dir, ignore_errors=True)
    os.makedirs(conv_dir)
    # One file per input so the C test reads the exact JSON text (3 vs 3.0 matters to str()).
    for conv in CONVERSATIONS:
        for key, val in (("messages", conv["messages"]), ("tools", conv.get("tools")),
                         ("kwargs", conv.get("kwargs", {}))):
            if val is None:
                continue
            with open(os.path.join(conv_dir, "%s.%s.json" % (conv["name"], key)), "w", encoding="utf-8") as fp:
                json.dump(val, fp, ensure_ascii=False, indent=1)
    with open(os.path.join(FIX, "conversations.txt"), "w", encoding="utf-8") as fp:
        fp.write("# bos_token=%s eos_token=%s strftime_now clock=%s (local time)\n" % (BOS, EOS, FIXED_NOW.isoformat()))
        for conv in CONVERSATIONS:
            fp.write(conv["name"] + "\n")
    env = make_env()
    gen_cases(env)
    exp_root = os.path.join(FIX, "expected")
    shutil.rmtree(exp_root, ignore_errors=True)
    ok = err = 0
    for tname, path in jobs:
        d = os.path.join(exp_root, tname)
        os.makedirs(d, exist_ok=True)
        with open(path, encoding="utf-8") as fp:
            text = fp.read()
        try:
            tmpl = env.from_string(text)
        except Exception as e:
            tmpl = None
            perr = "%s: %s" % (type(e).__name__, e)
        for conv in CONVERSATIONS:
            base = os.path.join(d, conv["name"])
            if tmpl is None:
                out, ext = perr, ".err"
            else:
                try:
                    out, ext = tmpl.render(**context(conv)), ".txt"
                except Exception as e:
                    out, ext = "%s: %s" % (type(e).__name__, e), ".err"
            with open(base + ext, "w", encoding="utf-8", newline="") as fp:
                fp.write(out)
            if ext == ".txt":
                ok += 1
            else:
                err += 1
    print("templates: %d, conversations: %d, rendered: %d, errors: %d" % (len(jobs), len(CONVERSATIONS), ok, err))


if __name__ == "__main__":
    main()
