#!/usr/bin/env python3
"""tcm_layout.py - desk check of the tcm kernel's index arithmetic
(kernels/nvfp4_gemm.cu), for shapes the GPU runs do not reach.

A model of the kernel's X stage, its operand reads and its cluster
reduction, checked for every K split, block of the split and token count
of the given K values:
  - the X stage writes each element of the block's token rows and K range
    once, inside the shared memory the launcher gives it;
  - every operand read finds the X element the MMA expects there;
  - a quarter warp's 16-byte reads hit 32 distinct banks;
  - the reduction stores each (row, token) of the tile once, taking it
    from the accumulator that holds it.
Run: python3 tests/tools/tcm_layout.py (exit 1 on the first violation).
"""
import sys

SPAN = 136          # TCM_SPAN
WARPS = 8           # TCM_WARPS


def xcol(kk):       # tcm_xcol
    return kk // 128 * SPAN + kk % 128 + (8 if kk % 128 >= 64 else 0)


def xld(spans):     # tcm_xld
    return spans * SPAN + ((16 - 8 * spans) % 64 + 64) % 64


def smem_elems(nt, ks, k):  # tcm_smem / 2 (bf16 elements)
    spans = k // 128
    longest = (spans + ks - 1) // ks
    return max(nt * 8 * xld(longest), WARPS * nt * 4 * 32 * 4 // 2)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_block(nt, ks, kr, k, m):
    spans = k // 128
    s0 = kr * spans // ks
    my = (kr + 1) * spans // ks - s0
    if my < 1:
        fail(f"empty block nt {nt} ks {ks} kr {kr} k {k}")
    if my > 16:
        fail(f"K range of {my} spans > 16")
    ld = xld(my)
    if (ld * 2) % 128 != 32:
        fail(f"row stride {ld * 2} bytes is not 32 past a multiple of 128")
    # the X stage
    written = {}
    per_row, rstep = my * 16, 256 // (my * 16)
    for tid in range(256):
        q, r0 = tid % per_row, tid // per_row
        if r0 >= rstep:
            continue
        for r in range(r0, nt * 8, rstep):
            tok = r if r < m else m - 1
            for e in range(8):
                idx = r * ld + xcol(q * 8) + e
                if idx in written:
                    fail(f"X stage writes {idx} twice")
                written[idx] = (tok, s0 * 128 + q * 8 + e)
    if len(written) != nt * 8 * my * 128:
        fail(f"X stage wrote {len(written)} of {nt * 8 * my * 128}")
    if max(written) >= smem_elems(nt, ks, k):
        fail("X stage past the block's shared memory")
    # the operand reads: lane (gq, c), tile t, span s, K-step pair jj
    for t in range(nt):
        for s in range(my):
            for jj in range(4):
                for lane in range(32):
                    gq, c = lane >> 2, lane & 3
                    base = gq * ld + xcol(32 * c) + t * 8 * ld + s * SPAN + 8 * jj
                    for e in range(8):
                        want = (min(t * 8 + gq, m - 1), s0 * 128 + s * 128 + 32 * c + 8 * jj + e)
                        if written.get(base + e) != want:
                            fail(f"read {base + e} finds {written.get(base + e)}, wants {want}")
                for qw in range(4):  # quarter warps: 16-byte reads, 8 lanes
                    banks = set()
                    for lane in range(8 * qw, 8 * qw + 8):
                        gq, c = lane >> 2, lane & 3
                        byte = 2 * (gq * ld + xcol(32 * c) + t * 8 * ld + s * SPAN + 8 * jj)
                        banks |= {(byte // 4 + w) % 32 for w in range(4)}
                    if len(banks) != 32:
                        fail(f"bank conflict: quarter {qw} hits {len(banks)} banks (ld {ld})")


def check_reduction(nt, ks, m):
    stored = set()
    for kr in range(ks):
        for tid in range(256):
            i = kr * 256 + tid
            while i < WARPS * nt * 32:
                g, q, t, w = i & 7, (i >> 3) & 3, (i >> 5) % nt, (i >> 5) // nt
                row = w * 16 + g + (q >> 1) * 8
                for j in range(4):
                    tok = t * 8 + 2 * j + (q & 1)
                    # the accumulator that holds it: warp w, acc[t][q], lane 4g + j
                    lane = 4 * g + j
                    if (lane >> 2) + 8 * (q >> 1) != row - w * 16 or t * 8 + 2 * (lane & 3) + (q & 1) != tok:
                        fail("reduction reads the wrong accumulator")
                    if tok < m:
                        if (row, tok) in stored:
                            fail(f"({row}, {tok}) stored twice")
                        stored.add((row, tok))
                i += ks * 256
    if len(stored) != WARPS * 16 * min(m, nt * 8):
        fail(f"reduction stored {len(stored)} of {WARPS * 16 * min(m, nt * 8)}")


def main():
    n_cases = 0
    for k in (128, 256, 384, 512, 768, 2048, 3072, 4096, 6144):
        spans = k // 128
        for nt in (2, 4, 8):
            for ks in (1, 2, 4, 8):
                if ks > spans or (spans + ks - 1) // ks > 16:
                    continue
                if nt * 8 * xld((spans + ks - 1) // ks) * 2 > 208 * 1024:
                    continue  # no launch uses it (tcm_ks keeps X within its limit)
                for m in sorted({1, nt * 4 + 1, nt * 8}):
                    for kr in range(ks):
                        check_block(nt, ks, kr, k, m)
                    check_reduction(nt, ks, m)
                    n_cases += 1
    print(f"tcm layout: {n_cases} (K, tiles, K split, M) cases, all blocks: OK")


if __name__ == "__main__":
    main()
