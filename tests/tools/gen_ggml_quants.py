#!/usr/bin/python3
"""gen_ggml_quants.py OUT.safetensors - random ggml blocks of every type lynn
dequantizes (src/formats/ggml_quants.c) and what llama.cpp's gguf-py
(gguf.quants.dequantize, GGUF_PY, default /work/oracles/llama.cpp/gguf-py;
imported, not copied) makes of them: for each type T, tensor "T.raw" (U8,
[rows, row bytes]) and "T.f32" (F32, [rows, row elements]). The block bytes
are random, except the f16 scale fields, which are random finite halves (a
random bit pattern could be NaN, and NaN payloads are not what is compared).
tests/check_ggufrun.c requires lynn's dequant to match bit for bit.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.environ.get("GGUF_PY", "/work/oracles/llama.cpp/gguf-py"))
from gguf import GGMLQuantizationType as T, quants  # noqa: E402

ROWS = 3
# type: (row elements, block bytes, block elements, offsets of f16 fields in a block)
TYPES = {
    "F32": (T.F32, 64, 4, 1, []),
    "F16": (T.F16, 64, 2, 1, [0]),
    "BF16": (T.BF16, 64, 2, 1, []),
    "Q4_0": (T.Q4_0, 128, 18, 32, [0]),
    "Q4_1": (T.Q4_1, 128, 20, 32, [0, 2]),
    "Q5_0": (T.Q5_0, 128, 22, 32, [0]),
    "Q5_1": (T.Q5_1, 128, 24, 32, [0, 2]),
    "Q8_0": (T.Q8_0, 128, 34, 32, [0]),
    "Q4_K": (T.Q4_K, 512, 144, 256, [0, 2]),
    "Q5_K": (T.Q5_K, 512, 176, 256, [0, 2]),
    "Q6_K": (T.Q6_K, 512, 210, 256, [208]),
}


def rand_half(rng, n):
    # finite f16 of both signs, magnitudes 2^-16 .. 2^4, plus a few zeros/subnormals
    v = rng.uniform(-1, 1, n) * np.exp2(rng.integers(-16, 5, n))
    v[rng.random(n) < 0.05] = 0.0
    v[rng.random(n) < 0.05] = 3e-6  # subnormal half
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(20261130)
    tensors = {}
    for name, (qt, n, bb, be, f16) in TYPES.items():
        nb = ROWS * n // be
        raw = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
        if name == "F32":
            raw = rng.standard_normal(nb).astype(np.float32).view(np.uint8).reshape(nb, 4)
        elif name == "BF16":
            raw = (rng.standard_normal(nb).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nb, 2)
        for off in f16:
            raw[:, off:off + 2] = rand_half(rng, nb)
        raw = raw.reshape(ROWS, -1)
        deq = quants.dequantize(raw, qt).astype(np.float32)
        assert deq.shape == (ROWS, n), (name, deq.shape)
        assert np.isfinite(deq).all(), name
        tensors[name + ".raw"] = ("U8", raw)
        tensors[name + ".f32"] = ("F32", deq)
    hdr, blobs, off = {}, [], 0
    for k, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr["__metadata__"] = {"generator": "tests/tools/gen_ggml_quants.py", "oracle": "gguf-py gguf.quants.dequantize"}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print(out)


if __name__ == "__main__":
    main()
