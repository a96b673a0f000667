#!/usr/bin/env python3
"""torch_nvfp4_dequant.py OUTDIR - compare lynn's reference NVFP4 dequant
(src/formats/nvfp4.c, loaded through ctypes) with torch's float8_e4m3fn on
the GPU, on fresh random tensors, in both scale conventions; bit-exact match
expected (q*s is exact, then one f32 divide or multiply in both).
Runs where torch is installed (the GPU machine); writes OUTDIR/torch_dequant.json."""
import ctypes, json, os, subprocess, sys, tempfile

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "."
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
lib = os.path.join(tempfile.mkdtemp(), "libnvfp4.so")
subprocess.check_call(["gcc", "-std=c11", "-O2", "-D_GNU_SOURCE", "-shared", "-fPIC",
                       "-I" + os.path.join(root, "include"),
                       os.path.join(root, "src/formats/nvfp4.c"),
                       os.path.join(root, "src/formats/dtype.c"),
                       os.path.join(root, "src/core/err.c"), "-o", lib, "-lm"])
L = ctypes.CDLL(lib)
L.lynn_nvfp4_dequant_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_float, ctypes.c_int64, ctypes.c_void_p]
dev = "cuda" if torch.cuda.is_available() else "cpu"
e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                    device=dev)
res = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
       "torch": torch.__version__, "cases": []}
ok_all = True
for seed, (N, K) in enumerate([(64, 256), (300, 2048), (17, 16), (1024, 512)]):
    g = torch.Generator(device=dev).manual_seed(1000 + seed)
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=dev, generator=g)
    bits = torch.randint(0, 255, (N, K // 16), dtype=torch.uint8, device=dev, generator=g)
    bits = torch.where((bits & 0x7F) == 0x7F, bits ^ 1, bits)   # no NaN codes; all others incl. 0, subnormal, negative
    scales = bits.view(torch.float8_e4m3fn)
    gs = float(torch.empty(1).uniform_(1.0, 5000.0).item())
    q = torch.stack([e2m1[(packed & 15).long()], e2m1[(packed >> 4).long()]], -1).reshape(N, K)
    s = scales.float().repeat_interleave(16, dim=1)
    gct = torch.tensor(gs, dtype=torch.float32, device=dev)
    g2 = torch.tensor(1.0 / gs, dtype=torch.float32, device=dev)
    refs = {1: (q * s / gct).cpu().contiguous(), 2: (q * s * g2).cpu().contiguous()}
    stored = {1: float(gct.item()), 2: float(g2.item())}
    pk = packed.cpu().contiguous()
    sc = bits.cpu().contiguous()
    for fmt, name in ((1, "compressed-tensors"), (2, "modelopt")):
        got = torch.empty(N, K, dtype=torch.float32)
        for r in range(N):
            L.lynn_nvfp4_dequant_row(fmt, pk[r].data_ptr(), sc[r].data_ptr(),
                                     ctypes.c_float(stored[fmt]), K, got[r].data_ptr())
        ref = refs[fmt]
        same = torch.equal(got.view(torch.int32), ref.view(torch.int32))
        maxdiff = float((got - ref).abs().max().item())
        ok_all &= same
        res["cases"].append({"n": N, "k": K, "format": name, "bit_exact": same,
                             "max_abs_diff": maxdiff})
        print(f"torch dequant {name:18s} {N}x{K}: bit-exact {same} (max diff {maxdiff:.3g})")
res["pass"] = ok_all
json.dump(res, open(os.path.join(out, "torch_dequant.json"), "w"), indent=1)
sys.exit(0 if ok_all else 1)
