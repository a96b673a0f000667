#!/usr/bin/python3
"""gen_gguf_fixture.py - a tiny qwen35moe-shaped GGUF for `lynn inspect`,
written with llama.cpp's gguf-py (the reference writer), and the figures
inspect must report, read back with gguf-py's GGUFReader:

  n_params        = sum of n_elements over tensors, except scales
                    (names ending ".scale" / ".input_scale", as llama.cpp's
                    NVFP4 import writes weight_scale_2 / input_scale)
  routed          = tensors with "_exps" in the name
  n_params_active = n_params - routed + routed * expert_used_count / expert_count

Usage (repo root): PYTHONPATH=/work/oracles/llama.cpp/gguf-py \
    /usr/bin/python3 tests/tools/gen_gguf_fixture.py
"""
import json

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import quantize

OUT = "tests/fixtures/inspect_tiny.gguf"


def main():
    rng = np.random.default_rng(7)
    w = GGUFWriter(OUT, "qwen35moe")
    w.add_uint32("qwen35moe.block_count", 1)
    w.add_uint32("qwen35moe.expert_count", 4)
    w.add_uint32("qwen35moe.expert_used_count", 2)
    w.add_uint32("qwen35moe.full_attention_interval", 4)
    w.add_uint32("general.file_type", 7)

    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    w.add_tensor("token_embd.weight", r(16, 32).astype(np.float16))
    w.add_tensor("blk.0.attn_norm.weight", r(32))
    w.add_tensor("blk.0.ffn_gate_inp.weight", r(4, 32))
    w.add_tensor("blk.0.ffn_gate_exps.weight", quantize(r(4, 32, 32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.ffn_up_exps.weight", quantize(r(4, 32, 32), Q.Q4_0), raw_dtype=Q.Q4_0)
    w.add_tensor("blk.0.ffn_down_exps.weight", quantize(r(4, 32, 32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.ffn_down_exps.scale", np.ones(4, dtype=np.float32))
    w.add_tensor("blk.0.ffn_up_shexp.weight", r(32, 32).astype(np.float16))
    w.add_tensor("output.weight", quantize(r(16, 32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    rd = GGUFReader(OUT)
    total = routed = 0
    types = {}
    for t in rd.tensors:
        n = int(t.n_elements)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        if t.name.endswith(".scale") or t.name.endswith(".input_scale"):
            continue
        total += n
        if "_exps" in t.name:
            routed += n
    exp = {
        "architecture": "qwen35moe",
        "n_tensors": len(rd.tensors),
        "n_params": total,
        "n_params_routed_experts": routed,
        "n_params_active": total - routed + routed * 2 // 4,
        "tensor_types": types,
    }
    with open("tests/fixtures/inspect_gguf_expected.json", "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
