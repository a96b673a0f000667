#!/usr/bin/python3
"""gen_bench_adapter.py MODEL_DIR OUT_DIR [RANK] - a random PEFT LoRA adapter for
the benchmark model of gen_bench_model.py (generated at bench time, never
committed): attention, DeltaNet and shared-expert projections of every layer,
f32 A and B. Needs numpy only."""
import json
import os
import struct
import sys

import numpy as np


def main():
    model, out = sys.argv[1], sys.argv[2]
    r = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    c = json.load(open(os.path.join(model, "config.json")))
    H = c["hidden_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    kd = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    vd = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    Is = c["shared_expert_intermediate_size"]
    shapes = {}
    for i, t in enumerate(c["layer_types"]):
        p = f"model.layers.{i}."
        if t == "full_attention":
            mods = {"self_attn.q_proj": (2 * nh * hd, H), "self_attn.k_proj": (nkv * hd, H),
                    "self_attn.v_proj": (nkv * hd, H), "self_attn.o_proj": (H, nh * hd)}
        else:
            mods = {"linear_attn.in_proj_qkv": (2 * kd + vd, H), "linear_attn.in_proj_z": (vd, H),
                    "linear_attn.out_proj": (H, vd)}
        mods.update({"mlp.shared_expert.gate_proj": (Is, H), "mlp.shared_expert.up_proj": (Is, H),
                     "mlp.shared_expert.down_proj": (H, Is)})
        for m, (o, n) in mods.items():
            shapes[f"base_model.model.{p}{m}.lora_A.weight"] = (r, n)
            shapes[f"base_model.model.{p}{m}.lora_B.weight"] = (o, r)
    rng = np.random.default_rng(1)
    header, off, blobs = {}, 0, []
    for k in sorted(shapes):
        a = (rng.standard_normal(shapes[k]) * 0.01).astype("<f4")
        b = a.tobytes()
        header[k] = {"dtype": "F32", "shape": list(shapes[k]), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    targets = sorted({k.split(".")[-3] for k in shapes})
    json.dump({"peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "target_modules": targets,
               "bias": "none", "use_rslora": False, "fan_in_fan_out": False},
              open(os.path.join(out, "adapter_config.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
