#!/usr/bin/python3
"""mk_tok_248k.py - a Qwen3.5-size tokenizer.json for the load-time benchmark.

    /usr/bin/python3 tests/bench/mk_tok_248k.py QWEN3_TOKENIZER_JSON OUT_DIR

No package ships the Qwen3.5 tokenizer (248,077 ids). This grows the real
Qwen3 tokenizer.json (151,643 BPE tokens, 151,387 merges) to the Qwen3.5
shape: 248,044 BPE tokens and 247,587 merges (new merges join two existing
tokens, chosen deterministically), the Qwen3.5 Split regex, and the 33 added
tokens at 248,044..248,076. Only for timing: the extra merges are not real.
"""
import json
import os
import sys

QWEN35_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
             "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
         "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
         "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
         "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
         "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
         "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
         "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]


def main():
    src, out = sys.argv[1], sys.argv[2]
    t = json.load(open(src, encoding="utf-8"))
    m = t["model"]
    vocab, merges = m["vocab"], m["merges"]
    toks = sorted(vocab, key=vocab.get)
    n_bpe, n_merges = 248044, 247587
    k = 0
    while len(vocab) < n_bpe:
        a = toks[1000 + k % 60000]
        b = toks[1000 + (k * 7919 + k // 60000) % 50021]
        k += 1
        if a + b in vocab:
            continue
        vocab[a + b] = len(vocab)
        merges.append([a, b])
    del merges[n_merges:]
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN35_RE
    t["added_tokens"] = [{"id": n_bpe + i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": not c.startswith("<t")}
                         for i, c in enumerate(ADDED)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False, indent=2)
    print(f"mk_tok_248k: {len(vocab)} BPE tokens, {len(merges)} merges, "
          f"{len(vocab) + len(ADDED)} ids -> {out}/tokenizer.json")


if __name__ == "__main__":
    main()
