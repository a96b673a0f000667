#!/usr/bin/python3
"""bench_sample_peer.py LOGITS_F32 - the peer of bench_sample.c: numpy on the same
248,320 logits, the way a Python serving script picks tokens: np.argmax for
greedy; for sampling, np.argpartition for top-k, a descending sort of the
kept logits, softmax, cumsum for top-p, one draw (transformers' TopK/TopP
warpers do the same with torch.topk and a full sort); the log-sum-exp of a
log-softmax; and the flat-logits row on numpy's own uniform draw. Best of 5,
microseconds a pick, single thread."""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np


def pick(lg, t, top_k, top_p, rng):
    v = lg / t
    if top_k == 0 and top_p >= 1.0:  # plain temperature: no order needed
        p = np.exp(v - v.max())
        return int(np.searchsorted(np.cumsum(p), rng.random() * p.sum()))
    idx = np.argpartition(-v, top_k)[:top_k] if 0 < top_k < v.size else np.arange(v.size)
    idx = idx[np.argsort(-v[idx], kind="stable")]
    p = np.exp(v[idx] - v[idx[0]])
    p /= p.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), top_p)) + 1
        idx, p = idx[:keep], p[:keep] / p[:keep].sum()
    return idx[np.searchsorted(np.cumsum(p), rng.random() * p.sum())] if p.size > 1 else idx[0]


def best(f, reps):
    b = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        b = min(b, (time.perf_counter() - t0) / reps * 1e6)
    return b


def main():
    lg = np.fromfile(sys.argv[1], dtype=np.float32)
    rng = np.random.default_rng(1)
    print("numpy %s, vocab %d, 1 thread: greedy (np.argmax) %.1f us a pick" %
          (np.__version__, lg.size, best(lambda: int(np.argmax(lg)), 200)))

    def lse():
        m = lg.max()
        return m + np.log(np.exp(lg - m).sum())
    print("numpy, vocab %d, 1 thread: log-sum-exp %.1f us" % (lg.size, best(lse, 20)))
    # the last row: nearly flat logits, uniform in [0, 0.5) as bench_sample's (another draw)
    flat = (np.random.default_rng(7).random(lg.size) * 0.5).astype(np.float32)
    for name, x, t, k, p in (("temperature 0.7, top-k 20, top-p 0.8", lg, 0.7, 20, 0.8),
                             ("temperature 0.7, top-p 0.95", lg, 0.7, 0, 0.95),
                             ("temperature 1", lg, 1.0, 0, 1.0),
                             ("temperature 0.7, top-p 0.95 over nearly flat logits (in [0, 0.5))",
                              flat, 0.7, 0, 0.95)):
        print("numpy, vocab %d, 1 thread: %s: %.1f us a pick" %
              (lg.size, name, best(lambda: pick(x, t, k, p, rng), 20)))


if __name__ == "__main__":
    main()
