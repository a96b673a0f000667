#!/usr/bin/python3
"""mk_sparse_ckpt.py DIR - a Qwen3.6-35B-A3B-shaped bf16 checkpoint made of
sparse files (headers written, data left as holes): the released layout
(multimodal names, fused 3-D experts, vision tower, MTP layer), cut into
5 GB shards with model.safetensors.index.json, plus config.json. About 70 GB
apparent, a few MB on disk. Shapes: docs/reference qwen35moe-architecture.md.
"""
import json
import os
import struct
import sys

H, V, L, E, I, SI = 2048, 248320, 40, 256, 512, 512
NH, NKV, HD = 16, 2, 256
LK, LV, DK, DV = 16, 32, 128, 128
VIS_D, VIS_I, VIS_DEPTH = 1152, 4304, 27


def layer(prefix, i, full):
    t = {}
    p = f"{prefix}layers.{i}."
    t[p + "input_layernorm.weight"] = [H]
    t[p + "post_attention_layernorm.weight"] = [H]
    if full:
        a = p + "self_attn."
        t[a + "q_proj.weight"] = [2 * NH * HD, H]
        t[a + "k_proj.weight"] = [NKV * HD, H]
        t[a + "v_proj.weight"] = [NKV * HD, H]
        t[a + "o_proj.weight"] = [H, NH * HD]
        t[a + "q_norm.weight"] = [HD]
        t[a + "k_norm.weight"] = [HD]
    else:
        a = p + "linear_attn."
        conv = 2 * LK * DK + LV * DV
        t[a + "in_proj_qkv.weight"] = [conv, H]
        t[a + "in_proj_z.weight"] = [LV * DV, H]
        t[a + "in_proj_b.weight"] = [LV, H]
        t[a + "in_proj_a.weight"] = [LV, H]
        t[a + "conv1d.weight"] = [conv, 1, 4]
        t[a + "dt_bias"] = [LV]
        t[a + "A_log"] = [LV]
        t[a + "norm.weight"] = [DV]
        t[a + "out_proj.weight"] = [H, LV * DV]
    m = p + "mlp."
    t[m + "gate.weight"] = [E, H]
    t[m + "experts.gate_up_proj"] = [E, 2 * I, H]
    t[m + "experts.down_proj"] = [E, H, I]
    t[m + "shared_expert.gate_proj.weight"] = [SI, H]
    t[m + "shared_expert.up_proj.weight"] = [SI, H]
    t[m + "shared_expert.down_proj.weight"] = [H, SI]
    t[m + "shared_expert_gate.weight"] = [1, H]
    return t


def all_tensors():
    t = {"model.language_model.embed_tokens.weight": [V, H]}
    for i in range(L):
        t.update(layer("model.language_model.", i, (i + 1) % 4 == 0))
    t["model.language_model.norm.weight"] = [H]
    t["lm_head.weight"] = [V, H]
    t.update(layer("mtp.", 0, True))
    t["mtp.fc.weight"] = [H, 2 * H]
    t["mtp.norm.weight"] = [H]
    t["model.visual.patch_embed.proj.weight"] = [VIS_D, 3, 2, 16, 16]
    for b in range(VIS_DEPTH):
        p = f"model.visual.blocks.{b}."
        t[p + "attn.qkv.weight"] = [3 * VIS_D, VIS_D]
        t[p + "attn.proj.weight"] = [VIS_D, VIS_D]
        t[p + "mlp.linear_fc1.weight"] = [VIS_I, VIS_D]
        t[p + "mlp.linear_fc2.weight"] = [VIS_D, VIS_I]
    return t


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tensors = all_tensors()
    shards, cur, size = [], [], 0
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        if cur and size + n > 5_000_000_000:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape, n))
        size += n
    shards.append(cur)
    wm, total = {}, 0
    for k, sh in enumerate(shards):
        fn = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        hdr, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, n in sorted(sh, key=lambda x: x[0]):
            hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
            wm[name] = fn
        total += off
        b = json.dumps(hdr, separators=(",", ":")).encode()
        b += b" " * (-len(b) % 8)
        with open(os.path.join(out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(b)) + b)
            f.truncate(8 + len(b) + off)  # the data is a hole
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, f,
                  indent=2)
    text = {
        "model_type": "qwen3_5_moe_text", "vocab_size": V, "hidden_size": H,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
        "head_dim": HD, "linear_num_key_heads": LK, "linear_num_value_heads": LV,
        "linear_key_head_dim": DK, "linear_value_head_dim": DV, "linear_conv_kernel_dim": 4,
        "num_experts": E, "num_experts_per_tok": 8, "moe_intermediate_size": I,
        "shared_expert_intermediate_size": SI, "full_attention_interval": 4,
        "rms_norm_eps": 1e-6, "mtp_num_hidden_layers": 1, "eos_token_id": 248044,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                            "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
    }
    cfg = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
           "text_config": text, "vision_config": {"depth": VIS_DEPTH}, "tie_word_embeddings": False}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{len(tensors)} tensors, {len(shards)} shards, {total / 1e9:.1f} GB of tensor data")


if __name__ == "__main__":
    main()
