#!/usr/bin/python3
"""gen_tok_llama.py - expected ids from llama.cpp's tokenizer for a sample of
the tokenizer corpus (every 11th case), with the qwen35 vocab GGUF.

    /usr/bin/python3 tests/tools/gen_tok_llama.py [LLAMA_TOKENIZE] [VOCAB_GGUF]

Defaults: /work/oracles/llama-build/bin/llama-tokenize (a CMake build of the
llama.cpp source bundled with node-llama-cpp, see TESTING.md) and
/work/oracles/llama.cpp/models/ggml-vocab-qwen35.gguf. Each case's bytes are
decoded with errors="replace" (the WHATWG rule, as the HF fixtures) and
given to `llama-tokenize -f FILE --ids --no-bos --no-escape --no-parse-special`
(no backslash-escape processing; special tokens as text, as llama.cpp's own
vocab tests run). Writes
tests/fixtures/tok/llama_qwen35.jsonl: {"case": N, "ids": [...]} per line.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else "/work/oracles/llama-build/bin/llama-tokenize"
    vocab = sys.argv[2] if len(sys.argv) > 2 else \
        "/work/oracles/llama.cpp/models/ggml-vocab-qwen35.gguf"
    cases = open(os.path.join(ROOT, "tests/fixtures/tok/corpus.b64")).read().splitlines()
    out = []
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "case.txt")
        for n in range(0, len(cases), 11):
            text = base64.b64decode(cases[n]).decode("utf-8", errors="replace")
            if not text:
                continue
            with open(path, "wb") as f:
                f.write(text.encode("utf-8"))
            r = subprocess.run([exe, "-m", vocab, "-f", path, "--ids", "--no-bos", "--no-escape",
                                "--no-parse-special", "--log-disable"],
                               capture_output=True, check=True)
            ids = json.loads(r.stdout.decode().strip().splitlines()[-1])
            out.append(json.dumps({"case": n, "ids": ids}))
    dst = os.path.join(ROOT, "tests/fixtures/tok/llama_qwen35.jsonl")
    with open(dst + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(dst + ".tmp", dst)
    print(f"gen_tok_llama: {len(out)} cases -> {os.path.relpath(dst, ROOT)}")


if __name__ == "__main__":
    main()
