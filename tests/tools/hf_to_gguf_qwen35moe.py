#!/usr/bin/python3
"""hf_to_gguf_qwen35moe.py HF_DIR OUT.gguf - write a lynn-readable Qwen3.5-MoE
safetensors folder (text-only or multimodal names; BF16 or F32; fused or
per-expert experts) as a llama.cpp `qwen35moe` GGUF, for the side-by-side
benchmark (tests/bench/llama_cpp.sh). Needs numpy and llama.cpp's gguf-py
(GGUF_PY, default /work/oracles/llama.cpp/gguf-py; imported, not copied).

The conversions are the documented ones (docs/reference/
qwen35moe-architecture.md §2.4, llama.cpp conversion/qwen.py): A_log ->
-exp(A_log); dt_bias -> ssm_dt.bias; conv1d squeezed to [C, K]; every
*norm.weight gets +1 except linear_attn.norm.weight; gate_up_proj split into
gate / up; V heads permuted from HF's grouped order to ggml's tiled order in
the V rows of in_proj_qkv, in_proj_z/a/b rows, A_log, dt_bias, conv1d V
channels and out_proj columns. Matrices keep their dtype (BF16, F16 or F32);
vectors are F32. No vocabulary is written (tokenizer model "none"): the
benchmark and the parity check feed token ids.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.environ.get("GGUF_PY", "/work/oracles/llama.cpp/gguf-py"))
import gguf  # noqa: E402


def load_st(folder):
    files = []
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        p = os.path.join(folder, fn)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        mm = np.memmap(p, dtype=np.uint8, mode="r")
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            s, e = v["data_offsets"]
            dt = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16}[v["dtype"]]
            out[k] = (v["dtype"], mm[8 + n + s:8 + n + e].view(dt).reshape(v["shape"]))
    return out


def f32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(src, "config.json")))
    c = cfg.get("text_config", cfg)
    T = load_st(src)

    def get(name):
        for pre in ("model.language_model.", "model.", ""):
            if pre + name in T:
                return T[pre + name]
        if name == "lm_head.weight" and "lm_head.weight" in T:
            return T["lm_head.weight"]
        raise KeyError(name)

    L, H, E = c["num_hidden_layers"], c["hidden_size"], c["num_experts"]
    I, Is = c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    rp = c.get("rope_parameters", {})
    prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25))
    types = c.get("layer_types") or ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)]
    r = Hv // Hk

    w = gguf.GGUFWriter(dst, "qwen35moe")
    w.add_block_count(L)
    w.add_context_length(c.get("max_position_embeddings", 4096))
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(rp.get("rope_theta", c.get("rope_theta", 1e7)))
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(I)
    w.add_expert_shared_feed_forward_length(Is)
    w.add_rope_dimension_count(int(c["head_dim"] * prf))
    w.add_rope_dimension_sections(list(rp.get("mrope_section", [11, 11, 10])) + [0])
    w.add_ssm_conv_kernel(K)
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(Hk)
    w.add_ssm_time_step_rank(Hv)
    w.add_ssm_inner_size(dv * Hv)
    w.add_array("qwen35moe.attention.recurrent_layers", [t == "linear_attention" for t in types])
    w.add_vocab_size(c["vocab_size"])
    w.add_tokenizer_model("none")
    mdt = get("embed_tokens.weight")[0]
    w.add_file_type({"BF16": gguf.LlamaFileType.MOSTLY_BF16, "F16": gguf.LlamaFileType.MOSTLY_F16}.get(mdt, gguf.LlamaFileType.ALL_F32))

    def put(name, dtype, a, vec=False):
        if vec or dtype == "F32":
            w.add_tensor(name, np.ascontiguousarray(f32(dtype, a)))
        elif dtype == "F16":
            w.add_tensor(name, np.ascontiguousarray(a), raw_dtype=gguf.GGMLQuantizationType.F16)
        else:
            w.add_tensor(name, np.ascontiguousarray(a), raw_dtype=gguf.GGMLQuantizationType.BF16)

    def vreorder(a, dim, hd):
        """grouped v-head order (k*r + j) -> tiled (j*Hk + k) along dim"""
        shape = list(a.shape)
        a = a.reshape(shape[:dim] + [Hk, r, hd] + shape[dim + 1:])
        a = np.swapaxes(a, dim, dim + 1)
        return a.reshape(shape)

    dt, a = get("embed_tokens.weight")
    put("token_embd.weight", dt, a)
    dt, a = get("norm.weight")
    put("output_norm.weight", "F32", f32(dt, a) + 1, vec=True)
    dt, a = get("lm_head.weight")
    put("output.weight", dt, a)
    for i in range(L):
        p, b = "layers.%d." % i, "blk.%d." % i
        dt, a = get(p + "input_layernorm.weight")
        put(b + "attn_norm.weight", "F32", f32(dt, a) + 1, vec=True)
        dt, a = get(p + "post_attention_layernorm.weight")
        put(b + "post_attention_norm.weight", "F32", f32(dt, a) + 1, vec=True)
        if types[i] == "full_attention":
            for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                dt, a = get(p + "self_attn.%s.weight" % hf)
                put(b + gg + ".weight", dt, a)
            for hf, gg in (("q_norm", "attn_q_norm"), ("k_norm", "attn_k_norm")):
                dt, a = get(p + "self_attn.%s.weight" % hf)
                put(b + gg + ".weight", "F32", f32(dt, a) + 1, vec=True)
        else:
            la = p + "linear_attn."
            dt, a = get(la + "in_proj_qkv.weight")
            qk = 2 * Hk * dk
            a = np.concatenate([a[:qk], vreorder(np.asarray(a[qk:]), 0, dv)], axis=0)
            put(b + "attn_qkv.weight", dt, a)
            dt, a = get(la + "in_proj_z.weight")
            put(b + "attn_gate.weight", dt, vreorder(np.asarray(a), 0, dv))
            dt, a = get(la + "in_proj_b.weight")
            put(b + "ssm_beta.weight", dt, vreorder(np.asarray(a), 0, 1))
            dt, a = get(la + "in_proj_a.weight")
            put(b + "ssm_alpha.weight", dt, vreorder(np.asarray(a), 0, 1))
            dt, a = get(la + "conv1d.weight")
            a = f32(dt, a).reshape(a.shape[0], K)
            a = np.concatenate([a[:qk], vreorder(a[qk:], 0, dv)], axis=0)
            put(b + "ssm_conv1d.weight", "F32", a, vec=True)
            dt, a = get(la + "dt_bias")
            put(b + "ssm_dt.bias", "F32", vreorder(f32(dt, a).reshape(Hv, 1), 0, 1).reshape(Hv), vec=True)
            dt, a = get(la + "A_log")
            put(b + "ssm_a", "F32", vreorder(-np.exp(f32(dt, a)).reshape(Hv, 1), 0, 1).reshape(Hv), vec=True)
            dt, a = get(la + "norm.weight")
            put(b + "ssm_norm.weight", "F32", f32(dt, a), vec=True)
            dt, a = get(la + "out_proj.weight")
            put(b + "ssm_out.weight", dt, vreorder(np.asarray(a), 1, dv))
        m = p + "mlp."
        dt, a = get(m + "gate.weight")
        put(b + "ffn_gate_inp.weight", dt, a)
        try:
            dt, gu = get(m + "experts.gate_up_proj")
            put(b + "ffn_gate_exps.weight", dt, gu[:, :I, :])
            put(b + "ffn_up_exps.weight", dt, gu[:, I:, :])
            dt, dn = get(m + "experts.down_proj")
            put(b + "ffn_down_exps.weight", dt, dn)
        except KeyError:
            for hf, gg in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
                parts = [get(m + "experts.%d.%s.weight" % (e, hf)) for e in range(E)]
                put(b + gg + ".weight", parts[0][0], np.stack([x[1] for x in parts]))
        for hf, gg in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
            dt, a = get(m + "shared_expert.%s.weight" % hf)
            put(b + gg + ".weight", dt, a)
        dt, a = get(m + "shared_expert_gate.weight")
        put(b + "ffn_gate_inp_shexp.weight", dt, np.asarray(a).reshape(H))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(dst)


if __name__ == "__main__":
    main()
