#!/usr/bin/python3
"""prefix_cache.py PORT [TURNS] - a multi-turn chat against a running `lynn serve`
(tests/bench/prefix_cache.sh starts it): a long system prompt, then TURNS user
messages, each answered with one greedy token (so the time is the prompt's:
its prefill and one step), the answer kept in the conversation; then a new
conversation with the same system prompt. Prints one line per request:
prompt tokens, the tokens the server's prefix cache gave
(usage.prompt_tokens_details.cached_tokens) and the request's wall time.
Standard library only."""
import json
import sys
import time
import urllib.error
import urllib.request

WORDS = ("river stone cloud lantern harbor meadow copper violet engine garden "
         "signal thunder orbit candle market silver forest window ladder shadow").split()


def text(seed, n):
    """n words, the same for the same seed"""
    x, out = seed * 2654435761 % 2**32, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[x % len(WORDS)])
    return " ".join(out)


def ask(port, msgs):
    body = json.dumps({"messages": msgs, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            j = json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"prefix_cache.py: HTTP {e.code}: {e.read().decode()[:300]}")
    return time.perf_counter() - t0, j


def main():
    port, turns = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 4
    msgs = [{"role": "system", "content": "You answer questions about this text. " + text(1, 1500)}]
    total = 0.0
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Question {t + 1}: " + text(100 + t, 60)})
        dt, j = ask(port, msgs)
        u = j["usage"]
        cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        total += dt
        print(f"turn {t + 1}: prompt {u['prompt_tokens']} tokens, cached {cached}, {dt * 1000:.1f} ms")
        msgs.append({"role": "assistant", "content": j["choices"][0]["message"]["content"] or "ok"})
    print(f"all {turns} turns: {total * 1000:.1f} ms")
    other = [msgs[0], {"role": "user", "content": "Another question: " + text(999, 60)}]
    dt, j = ask(port, other)
    u = j["usage"]
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    print(f"new conversation, same system prompt: prompt {u['prompt_tokens']} tokens, cached {cached}, "
          f"{dt * 1000:.1f} ms")


if __name__ == "__main__":
    main()
