#!/usr/bin/python3
"""gen_inspect_expected.py - expected `lynn inspect --json` figures for the
tiny fixtures, computed independently of lynn: the safetensors headers are
read here with struct + json, and the counts follow docs/lynn-inspect.md:

  n_params        = sum over tensors of numel, except quantization scales
                    (none in these bf16/f32 fixtures)
  routed          = sum over tensors whose name contains ".experts."
  n_params_active = n_params - routed + routed * num_experts_per_tok / num_experts
  vision          = tensors under model.visual.
  n_params_active_text = n_params_active without the vision tower and the MTP
                    head (mtp.*: none in these fixtures)

Also writes the f32 -> f16 reference conversions made by numpy (IEEE
round-to-nearest-even) for the dtype tests.

Usage: /usr/bin/python3 tests/tools/gen_inspect_expected.py   (from the repo root)
"""
import json
import os
import struct

import numpy as np

FX = "tests/fixtures"


def headers(folder):
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    out = {}
    for f in files:
        with open(os.path.join(folder, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        h.pop("__metadata__", None)
        for k, v in h.items():
            out[k] = (v, f)
    return files, out


def expected(folder):
    files, tensors = headers(folder)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    text = cfg.get("text_config", cfg)
    total = routed = vision = mtp = mtp_routed = 0
    for name, (v, _) in tensors.items():
        numel = 1
        for d in v["shape"]:
            numel *= d
        total += numel
        if ".experts." in name:
            routed += numel
        if name.startswith("model.visual."):
            vision += numel
        if name.startswith("mtp.") or name.startswith("model.mtp."):
            mtp += numel
            if ".experts." in name:
                mtp_routed += numel
    k, ne = text["num_experts_per_tok"], text["num_experts"]
    active = total - routed + routed * k // ne
    active_text = active - vision - (mtp - mtp_routed + mtp_routed * k // ne)
    return {
        "architecture": cfg["architectures"][0],
        "n_tensors": len(tensors),
        "n_params": total,
        "n_params_active": active,
        "n_params_active_text": active_text,
        "n_params_routed_experts": routed,
        "n_params_vision": vision,
        "n_files": len(files),
        "total_bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in files),
    }


def main():
    res = {}
    for d in sorted(os.listdir(FX)):
        p = os.path.join(FX, d)
        if d.startswith("qwen35moe-tiny") and os.path.isdir(p):
            res[d] = expected(p)
    with open(os.path.join(FX, "inspect_expected.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")

    # f32 -> f16 by numpy: specials, ties, subnormals, overflow, random
    rng = np.random.default_rng(1234)
    special = np.array([0x00000000, 0x80000000, 0x3F800000, 0x7F800000, 0xFF800000,
                        0x7FC00000, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001,
                        0x47800000, 0x38800000, 0x387FFFFF, 0x33800000, 0x33000000,
                        0x33000001, 0x337FFFFF, 0x32FFFFFF, 0x3F801000, 0x3F803000,
                        0x3F801001, 0x7F7FFFFF, 0x00000001, 0x35400000, 0x35C00000],
                       dtype=np.uint32)
    ties = (rng.integers(0x33000000, 0x47800000, 2000, dtype=np.uint32) & ~np.uint32(0x1FFF)) \
        | np.uint32(0x1000)
    rand = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32)
    near = rng.integers(0x30000000, 0x48000000, 2000, dtype=np.uint32)
    bits = np.concatenate([special, ties, rand, near])
    f = bits.view(np.float32)
    f = f[~np.isnan(f)]  # NaN payload handling is checked separately
    with np.errstate(over="ignore"):
        h = f.astype(np.float16)
    with open(os.path.join(FX, "dtype_f16_ref.bin"), "wb") as fh:
        fh.write(struct.pack("<I", len(f)))
        fh.write(f.astype("<f4").tobytes())
        fh.write(h.view("<u2").tobytes())


if __name__ == "__main__":
    main()
