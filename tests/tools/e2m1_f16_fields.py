#!/usr/bin/env python3
"""e2m1_f16_fields.py - the search behind docs/benchmarks.md's claim that no
load-time nibble repacking lets one shift and one mask decode E2M1 into f16.

An E2M1 value lands exactly in an f16 (times 2^-14) when its 3 magnitude bits
sit at bits 9-11 and its sign at bit 15 of a half; a half2 register holds
two, at P = {9,10,11,15,25,26,27,31}. With `(w >> s) & mask` per half2, the
source bits of the half2s are translates of P. The search finds the most
disjoint translates inside 64 bits (16 values = 8 half2s); 8 would be needed."""


def best_packing(bits=64):
    P = [9, 10, 11, 15, 25, 26, 27, 31]
    best = []

    def rec(used, chosen, start):
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        for u in range(start, bits):
            pos = [p - 9 + u for p in P]
            if max(pos) >= bits or any(used[p] for p in pos):
                continue
            for p in pos:
                used[p] = True
            chosen.append(u)
            rec(used, chosen, u + 1)
            chosen.pop()
            for p in pos:
                used[p] = False

    rec([False] * bits, [], 0)
    return best


if __name__ == "__main__":
    b = best_packing()
    print(f"at most {len(b)} of 8 half2 fields fit in 64 bits (offsets {b})")
