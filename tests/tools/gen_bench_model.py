#!/usr/bin/python3
"""gen_bench_model.py OUT_DIR [--small] [--real L] [--f16] [--tokenizer DIR] - a random Qwen3.5-MoE checkpoint for
`make bench` (generated at bench time, never committed).

Mid-size: hidden 1024, 16 layers (3 DeltaNet : 1 full attention), 64 experts
top-8 (moe 256, shared 256), vocab 32768, bf16, fused 3-D experts as the
released checkpoints store them, text-only names. Weights ~ N(0, 0.02), norms
~ N(0, 0.1), so activations stay in range; the values carry no meaning, only
the shapes and bytes matter for speed. --small writes a 4-layer variant for
a quick check; --real L writes L layers (3 DeltaNet : 1 full attention) of
Qwen3.6-35B-A3B's own shapes (hidden 2048, 256 experts top-8, moe 512,
vocab 248320; qwen35moe-architecture.md §1), for timing a layer of the
real model (the GPU runner, tests/bench/runner_cuda.sh); --f16 stores the matrices as F16 instead (same draws),
for the llama.cpp side by side. --tokenizer DIR copies DIR's tokenizer,
template and generation_config.json and sizes the vocabulary to that
tokenizer (for `lynn serve`, which needs text). Needs numpy only.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def cfg(small):
    L = 4 if small else 16
    return {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "vocab_size": 32768, "hidden_size": 1024, "num_hidden_layers": L,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)],
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
        "linear_num_key_heads": 8, "linear_num_value_heads": 16,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 256,
        "shared_expert_intermediate_size": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25, "mrope_section": [6, 5, 5]},
        "partial_rotary_factor": 0.25, "max_position_embeddings": 32768, "eos_token_id": 1,
        "dtype": "bfloat16",
    }


def tensors(c):
    H, E, I, Is = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    Hk, Hv, dk, dv, K = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"], 4
    cd = 2 * Hk * dk + Hv * dv
    yield "model.embed_tokens.weight", (c["vocab_size"], H), 0.02
    for i, t in enumerate(c["layer_types"]):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", (H,), 0.1
        yield p + "post_attention_layernorm.weight", (H,), 0.1
        if t == "full_attention":
            yield p + "self_attn.q_proj.weight", (nh * hd * 2, H), 0.02
            yield p + "self_attn.k_proj.weight", (nkv * hd, H), 0.02
            yield p + "self_attn.v_proj.weight", (nkv * hd, H), 0.02
            yield p + "self_attn.o_proj.weight", (H, nh * hd), 0.02
            yield p + "self_attn.q_norm.weight", (hd,), 0.1
            yield p + "self_attn.k_norm.weight", (hd,), 0.1
        else:
            a = p + "linear_attn."
            yield a + "in_proj_qkv.weight", (cd, H), 0.02
            yield a + "in_proj_z.weight", (Hv * dv, H), 0.02
            yield a + "in_proj_b.weight", (Hv, H), 0.02
            yield a + "in_proj_a.weight", (Hv, H), 0.02
            yield a + "conv1d.weight", (cd, 1, K), 0.3
            yield a + "dt_bias", (Hv,), 0.5
            yield a + "A_log", (Hv,), 0.5
            yield a + "norm.weight", (dv,), 0.1
            yield a + "out_proj.weight", (H, Hv * dv), 0.02
        m = p + "mlp."
        yield m + "gate.weight", (E, H), 0.05
        yield m + "experts.gate_up_proj", (E, 2 * I, H), 0.02
        yield m + "experts.down_proj", (E, H, I), 0.02
        yield m + "shared_expert.gate_proj.weight", (Is, H), 0.02
        yield m + "shared_expert.up_proj.weight", (Is, H), 0.02
        yield m + "shared_expert.down_proj.weight", (H, Is), 0.02
        yield m + "shared_expert_gate.weight", (1, H), 0.02
    yield "model.norm.weight", (c["hidden_size"],), 0.1
    yield "lm_head.weight", (c["vocab_size"], c["hidden_size"]), 0.02


def to_bf16(a):
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def real(L):
    c = cfg(False)
    c.update({
        "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": L,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)],
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    })
    c["rope_parameters"]["mrope_section"] = [11, 11, 10]
    return c


def main():
    out = sys.argv[1]
    small = "--small" in sys.argv
    f16 = "--f16" in sys.argv
    c = real(int(sys.argv[sys.argv.index("--real") + 1])) if "--real" in sys.argv else cfg(small)
    if f16:
        c["dtype"] = "float16"
    os.makedirs(out, exist_ok=True)
    if "--tokenizer" in sys.argv:
        src = sys.argv[sys.argv.index("--tokenizer") + 1]
        with open(os.path.join(src, "tokenizer.json")) as f:
            t = json.load(f)
        c["vocab_size"] = 1 + max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]])
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
            if os.path.exists(os.path.join(src, name)):
                shutil.copy(os.path.join(src, name), os.path.join(out, name))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    specs = list(tensors(c))
    header, off = {}, 0
    for name, shape, _ in specs:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "F16" if f16 else "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    rng = np.random.default_rng(1234)
    tmp = os.path.join(out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape, scale in specs:
            n = int(np.prod(shape))
            for s in range(0, n, 1 << 24):
                k = min(1 << 24, n - s)
                v = rng.standard_normal(k, dtype=np.float32) * scale
                if name.endswith("A_log"):
                    v = np.log(rng.uniform(1.0, 16.0, k)).astype(np.float32)
                f.write((v.astype(np.float16) if f16 else to_bf16(v)).tobytes())
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    print("%s: %.2f GB" % (out, off / 1e9))


if __name__ == "__main__":
    main()
