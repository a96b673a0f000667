#!/usr/bin/python3
"""gen_gguf_fixtures.py [OUT_DIR] - GGUF files and llama.cpp's logits on them,
for tests/check_ggufrun.c (default OUT_DIR tests/fixtures/gguf).

Needs numpy, llama.cpp's gguf-py (GGUF_PY, default
/work/oracles/llama.cpp/gguf-py; imported, not copied) and a llama.cpp build
(LLAMA_BUILD, default /work/oracles/llama-build: bin/llama-quantize and the
static libs that tests/bench/llama_logits.c links against; built here into
build/llama_logits_plain with tests/tools/llama_plain_cpu.h: no repacked or
AMX weights, llama.cpp's plain CPU kernels). The oracle is llama.cpp itself: lynn's values are
never used.

Files (OUT_DIR):
- tiny-bf16.gguf: tests/fixtures/qwen35moe-tiny-text-bf16 converted with
  tests/tools/hf_to_gguf_qwen35moe.py (BF16 matrices, F32 vectors, tokenizer
  and chat template added): its oracle is transformers' logits in
  tests/fixtures/ref_logits.safetensors (same weights as every tiny model).
- tiny-q8_0.gguf: tests/fixtures/qwen35moe-tiny-text-f32 converted with
  tests/tools/hf_to_gguf_qwen35moe.py (F32) then `llama-quantize Q8_0`; rows
  are 64 long, so every matrix is Q8_0. The GGUF carries the tokenizer
  (gpt2 BPE, pre qwen35, from the folder's tokenizer.json) and the chat
  template, so it runs on text (quant-verify, generate).
- tiny256-q4_k_m.gguf: a random 2-layer model (DeltaNet + full attention)
  with rows of 256 (hidden 256, experts 4 of 256, shared expert 128, v-heads
  4 x 32 = 128) in F32, then `llama-quantize Q4_K_M`: Q4_K and Q6_K where rows
  are 256-multiples, llama-quantize's Q5_0 / Q8_0 fallbacks on the 128-long
  rows (ffn_down_shexp, ssm_out), F32 vectors. Same tokenizer.
- <name>.logits.safetensors: llama.cpp's logits [T, vocab] f32 for the
  prompt ids in the metadata ("ids"), teacher-forced, one row per position;
  and "greedy" [G] i32: llama.cpp's greedy continuation of the prompt
  (argmax of its last-position logits, G steps, each step a fresh run),
  "greedy_dequant" [G] the same on the dequantized copy (below);
  and "logits_dequant" [T, vocab]: llama.cpp on a copy of the file with
  every tensor dequantized to F32 by gguf-py (no activation quantization:
  the dequantize-then-f32-matmul reference; llama.cpp's CPU products with
  Q8_0 / k-quant weights quantize the activations to Q8_0 / Q8_K first).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.environ.get("GGUF_PY", "/work/oracles/llama.cpp/gguf-py"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import gguf  # noqa: E402
import hf_to_gguf_qwen35moe as conv  # noqa: E402
import gen_bench_model  # noqa: E402

LB = os.environ.get("LLAMA_BUILD", "/work/oracles/llama-build")
LS = os.environ.get("LLAMA_SRC", "/work/oracles/llama.cpp")
TINY = os.path.join(ROOT, "tests", "fixtures", "qwen35moe-tiny-text-f32")
TINY_BF16 = os.path.join(ROOT, "tests", "fixtures", "qwen35moe-tiny-text-bf16")
PROMPT = [319, 444, 417, 74, 277, 286, 86, 77, 287, 78, 87, 220, 73, 84, 279, 82,
          438, 324, 259, 367, 64, 89, 88, 331, 78, 70, 275, 71, 72, 299, 259, 267]
N_GREEDY = 12


class TokWriter(gguf.GGUFWriter):
    """The converter's writer, with the tiny tokenizer instead of model "none"."""

    def add_tokenizer_model(self, model):
        tj = json.load(open(os.path.join(TINY, "tokenizer.json")))
        vocab = tj["model"]["vocab"]
        n = len(vocab) + len(tj["added_tokens"])
        toks, types = [""] * n, [1] * n
        for t, i in vocab.items():
            toks[i] = t
        for a in tj["added_tokens"]:
            toks[a["id"]] = a["content"]
            types[a["id"]] = 3 if a["special"] else 4
        merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
        super().add_tokenizer_model("gpt2")
        self.add_tokenizer_pre("qwen35")
        self.add_token_list(toks)
        self.add_token_types(types)
        self.add_token_merges(merges)
        self.add_eos_token_id(482)
        self.add_pad_token_id(480)
        self.add_add_bos_token(False)
        self.add_chat_template(open(os.path.join(TINY, "chat_template.jinja")).read())


def convert(src, dst):
    gguf.GGUFWriter = TokWriter
    sys.argv = ["hf_to_gguf_qwen35moe.py", src, dst]
    conv.main()


def quantize(src, dst, qtype):
    subprocess.run([os.path.join(LB, "bin", "llama-quantize"), src, dst, qtype], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tiny256(folder):
    c = gen_bench_model.cfg(True)
    c.update({"vocab_size": 513, "hidden_size": 256, "num_hidden_layers": 2,
              "layer_types": ["linear_attention", "full_attention"],
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "linear_num_key_heads": 2, "linear_num_value_heads": 4,
              "linear_key_head_dim": 32, "linear_value_head_dim": 32,
              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
              "shared_expert_intermediate_size": 128, "eos_token_id": 480, "dtype": "float32",
              "max_position_embeddings": 4096})
    c["rope_parameters"]["mrope_section"] = [11, 11, 10]
    os.makedirs(folder, exist_ok=True)
    json.dump(c, open(os.path.join(folder, "config.json"), "w"), indent=1)
    rng = np.random.default_rng(256)
    hdr, blobs, off = {}, [], 0
    for name, shape, scale in gen_bench_model.tensors(c):
        # larger weights than the bench model so logits spread (argmax is meaningful)
        a = (rng.standard_normal(shape) * scale * 3).astype(np.float32)
        b = a.tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def dequantized_copy(src, dst):
    """src with every tensor dequantized to F32 by gguf-py (same metadata):
    llama.cpp on it is the dequantize-then-f32-matmul reference."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, "qwen35moe")
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        vt = f.types[0]
        sub = f.types[1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vt, sub)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_logits(exe, model, ids, vocab):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.f32")
        subprocess.run([exe, model, " ".join(map(str, ids)), out], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return np.fromfile(out, dtype=np.float32).reshape(len(ids), vocab)


def greedy_run(exe, model):
    ids, out = list(PROMPT), []
    for _ in range(N_GREEDY):
        nxt = int(llama_logits(exe, model, ids, 513)[-1].argmax())
        out.append(nxt)
        ids.append(nxt)
    return out


def write_logits(path, logits, deq, greedy, meta):
    t = {"logits": ("F32", logits), "logits_dequant": ("F32", deq),
         "greedy": ("I32", np.asarray(greedy[0], dtype=np.int32)),
         "greedy_dequant": ("I32", np.asarray(greedy[1], dtype=np.int32))}
    hdr, blobs, off = {}, [], 0
    for k, (dt, a) in t.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr["__metadata__"] = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in meta.items()}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "gguf")
    os.makedirs(out, exist_ok=True)
    exe = os.path.join(ROOT, "build", "llama_logits_plain")
    libs = [os.path.join(LB, p) for p in ("src/libllama.a", "ggml/src/libggml.a",
                                           "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a")]
    subprocess.run(["cc", "-O2", "-I" + LS + "/include", "-I" + LS + "/ggml/include",
                    "-include", os.path.join(ROOT, "tests", "tools", "llama_plain_cpu.h"),
                    os.path.join(ROOT, "tests", "bench", "llama_logits.c")] + libs +
                   ["-lstdc++", "-fopenmp", "-lm", "-pthread", "-o", exe], check=True)
    commit = subprocess.run(["git", "-C", LS, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    convert(TINY_BF16, os.path.join(out, "tiny-bf16.gguf"))
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "tiny-f32.gguf")
        convert(TINY, f32)
        quantize(f32, os.path.join(out, "tiny-q8_0.gguf"), "Q8_0")
        t256 = os.path.join(tmp, "tiny256")
        tiny256(t256)
        f32b = os.path.join(tmp, "tiny256-f32.gguf")
        convert(t256, f32b)
        quantize(f32b, os.path.join(out, "tiny256-q4_k_m.gguf"), "Q4_K_M")
    for name in ("tiny-q8_0", "tiny256-q4_k_m"):
        model = os.path.join(out, name + ".gguf")
        logits = llama_logits(exe, model, PROMPT, 513)
        with tempfile.TemporaryDirectory() as tmp:
            dq = os.path.join(tmp, "dequant.gguf")
            dequantized_copy(model, dq)
            deq = llama_logits(exe, dq, PROMPT, 513)
            greedy = [greedy_run(exe, m) for m in (model, dq)]
        types = {}
        r = gguf.GGUFReader(model)
        for t in r.tensors:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        write_logits(os.path.join(out, name + ".logits.safetensors"), logits, deq, greedy,
                     {"generator": "tests/tools/gen_gguf_fixtures.py", "oracle": "llama.cpp " + commit,
                      "model": name + ".gguf", "ids": PROMPT, "tensor_types": types})
        print(name, types, "greedy", greedy)


if __name__ == "__main__":
    main()
