#!/usr/bin/python3
"""The 50-turn conversation for tests/bench/jinja.sh, and Jinja2's render time on it (the peer).

  bench_jinja.py write DIR             writes DIR/messages.json and DIR/tools.json
  bench_jinja.py time DIR TEMPLATE N   median/best Jinja2 render time over N rounds
"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gen_template_fixtures import make_env, TOOLS  # noqa: E402


def conversation():
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    for i in range(12):
        msgs.append({"role": "user", "content": "Question %d: what is the weather in city %d, and why?" % (i, i)})
        msgs.append({"role": "assistant", "content": "Let me check.", "reasoning_content": "Need the tool for city %d." % i,
                     "tool_calls": [{"id": "c%d" % i, "type": "function", "function": {
                         "name": "get_weather", "arguments": {"city": "City %d" % i, "days": i % 5 + 1, "metric": i % 2 == 0}}}]})
        msgs.append({"role": "tool", "tool_call_id": "c%d" % i, "content": json.dumps({"temp": 20.5 + i, "sky": "clear"})})
        msgs.append({"role": "assistant", "content": "It is %.1f degrees and clear in City %d. " % (20.5 + i, i) * 3})
    msgs.append({"role": "user", "content": "Thanks, one last question?"})
    return msgs  # 1 + 12*4 + 1 = 50 messages


def main():
    if sys.argv[1] == "write":
        d = sys.argv[2]
        with open(os.path.join(d, "messages.json"), "w") as fp:
            json.dump(conversation(), fp, ensure_ascii=False)
        with open(os.path.join(d, "tools.json"), "w") as fp:
            json.dump(TOOLS, fp, ensure_ascii=False)
        return
    d, tpath, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
    msgs = json.load(open(os.path.join(d, "messages.json")))
    tools = json.load(open(os.path.join(d, "tools.json")))
    tmpl = make_env().from_string(open(tpath).read())
    ts = []
    for _ in range(n):
        t0 = time.thread_time()
        tmpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=True,
                    enable_thinking=False, bos_token="", eos_token="")
        ts.append((time.thread_time() - t0) * 1e6)
    ts.sort()
    print("jinja2: %s: median %.1f us, best %.1f us over %d rounds" % (tpath, ts[n // 2], ts[0], n))


if __name__ == "__main__":
    main()
