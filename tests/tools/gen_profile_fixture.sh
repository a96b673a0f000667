#!/bin/sh
# gen_profile_fixture.sh - tests/fixtures/profile/llama_routes.json: the MoE
# router's choices of llama.cpp (an implementation nobody here wrote) on the
# tiny text-only f32 model, for the prompts of tests/fixtures/profile/prompts,
# each rendered as `lynn profile` renders it (chat template, one user turn,
# generation prompt, thinking off; lynn's template and tokenizer are checked
# against Jinja2 and HF tokenizers elsewhere). tests/check_eval.c compares
# `lynn profile`'s counts and mean probabilities with these routes.
# Needs a llama.cpp build (LLAMA_BUILD, default /work/oracles/llama-build),
# its source (LLAMA_SRC) and gguf-py (GGUF_PY), as tests/bench/llama_cpp.sh.
set -e
cd "$(dirname "$0")/../.."
B=${LLAMA_BUILD:-/work/oracles/llama-build}
S=${LLAMA_SRC:-/work/oracles/llama.cpp}
M=tests/fixtures/qwen35moe-tiny-text-f32
F=tests/fixtures/profile
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -O2 -I"$S/include" -I"$S/ggml/include" tests/tools/llama_routes.c \
  "$B/src/libllama.a" "$B/ggml/src/libggml.a" "$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a" \
  -lstdc++ -fopenmp -lm -pthread -o "$tmp/llama_routes"
/usr/bin/python3 tests/tools/hf_to_gguf_qwen35moe.py "$M" "$tmp/tiny.gguf" >/dev/null
/usr/bin/python3 - "$tmp" "$M" "$F" <<'PY'
import json, subprocess, sys
tmp, model, fix = sys.argv[1:]
out = {"model": model, "oracle": "llama.cpp (libllama, cb_eval: ffn_moe_topk / ffn_moe_weights / ffn_moe_probs)",
       "prompts": []}
for line in open(fix + "/prompts/set.jsonl", encoding="utf-8"):
    rec = json.loads(line)
    msgs = tmp + "/m.json"
    json.dump([{"role": "user", "content": rec["prompt"]}], open(msgs, "w"))
    text = subprocess.run(["./lynn", "template", "--model", model, "--messages", msgs],
                          check=True, capture_output=True).stdout
    ids = json.loads(subprocess.run(["./lynn", "tokenize", "--model", model, "--json"], input=text,
                                    check=True, capture_output=True).stdout)["ids"]
    r = json.loads(subprocess.run([tmp + "/llama_routes", tmp + "/tiny.gguf", " ".join(map(str, ids))],
                                  check=True, capture_output=True).stdout)
    r["prompt"] = rec["prompt"]
    r["ids"] = ids
    out["prompts"].append(r)
json.dump(out, open(fix + "/llama_routes.json", "w"), ensure_ascii=False)
gaps = [t["gap"] for p in out["prompts"] for l in p["layers"] for t in l["tokens"]]
print("%d prompts, %d routes, smallest gap below the k-th choice %.3g" % (len(out["prompts"]), len(gaps), min(gaps)))
PY
