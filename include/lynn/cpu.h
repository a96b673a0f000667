/*
 * cpu.h - CPU kernels for the runner: multi-threaded matrix products whose
 * weights stay in their stored dtype (BF16, F16 or F32, typically straight
 * from a checkpoint's mmap) and are widened to f32 in registers.
 *
 * Every product is y[t][o] = sum_i W[o][i] * x[t][i] (PyTorch layout, W is
 * [n_out, n_in], row-major) for the n_tok rows of x: prefill pushes all its
 * tokens through each matrix at once, so the weights are read once per call,
 * not once per token. Several independent products go through one call
 * (lynn_cpu_matmul_many) so a layer's projections, or all routed experts of a
 * MoE block, share one parallel-for.
 *
 * Two implementations compute the same thing: an AVX2/FMA(/F16C) one,
 * compiled with target attributes and chosen at run time when the CPU has
 * those features, and a portable C twin. They differ only in the order of
 * f32 additions.
 */
#ifndef LYNN_CPU_H
#define LYNN_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/pool.h"
#include "lynn/st.h"

enum lynn_cpu_isa {
	LYNN_CPU_AUTO = 0,     /* the best the running CPU supports */
	LYNN_CPU_PORTABLE = 1, /* plain C */
	LYNN_CPU_AVX2 = 2,     /* AVX2 + FMA + F16C */
};

/* Does this CPU (and build) support `isa`? AUTO and PORTABLE always do. */
bool lynn_cpu_has(enum lynn_cpu_isa isa);
/* The ISA AUTO resolves to. */
enum lynn_cpu_isa lynn_cpu_best(void);
const char *lynn_cpu_isa_name(enum lynn_cpu_isa isa);

struct lynn_nvfp4_view;
struct lynn_ggml_view;

/* One product. x rows are ldx floats apart, y rows ldy floats apart.
 * With accumulate the product is added to y, else y is overwritten. */
struct lynn_mm {
	enum lynn_dtype wdt;   /* BF16, F16 or F32 */
	const void *w;         /* (n_out, n_in) row-major, borrowed */
	int64_t n_out, n_in;
	const float *x;        /* (n_tok, ldx) */
	int64_t ldx;
	float *y;              /* (n_tok, ldy) */
	int64_t ldy;
	int64_t n_tok;
	bool accumulate;
	const struct lynn_nvfp4_view *nv; /* NVFP4 weight (wdt/w unused): cpu_nvfp4.h */
	const struct lynn_ggml_view *gg;  /* ggml-quantized weight (wdt/w unused): ggml_quants.h */
};

/* Is `dt` a weight dtype the kernels read? */
bool lynn_cpu_wdtype_ok(enum lynn_dtype dt);

/* Run the n products in `mm` over the pool (NULL: serially). They must not
 * write to overlapping y. An n_tok of 0 is a no-op. */
void lynn_cpu_matmul_many(struct lynn_pool *pool, const struct lynn_mm *mm, int n,
			  enum lynn_cpu_isa isa);
/* One product (same as lynn_cpu_matmul_many with n = 1). */
void lynn_cpu_matmul(struct lynn_pool *pool, const struct lynn_mm *mm, enum lynn_cpu_isa isa);

/* Row `row` of a (rows, n) matrix of dtype dt into f32 (BF16, F16, F32). */
void lynn_cpu_row_to_f32(enum lynn_dtype dt, const void *w, int64_t row, int64_t n, float *out);

/* One step of the gated delta rule for one head, state S (dk, dv) f32 in
 * place (docs/reference/qwen35moe-architecture.md §3.4 step 7):
 *   S *= decay; m = S^T k; delta = (v - m) * beta; S += k delta^T; o = S^T q.
 * isa: PORTABLE, or AVX2 only where lynn_cpu_has says so (AUTO detects the
 * CPU on each call; pass a resolved isa from pool threads). */
void lynn_cpu_delta_step(float *S, int dk, int dv, const float *k, const float *q, const float *v,
			 float beta, float decay, float *o, enum lynn_cpu_isa isa);

/* v[0..n) replaced by its softmax (max subtracted, f32 sums) */
void lynn_cpu_softmax(float *v, int64_t n);

/* Attention of one position's G query heads that share one KV head over
 * its T cached positions: o_h = softmax(scale * K q_h) V for h < G. q row h
 * at q + h * ldq, key and value t at k + t * ldkv and v + t * ldkv, output
 * row h at o + h * ldo (hd floats each); sc: scratch of G * T floats. Each
 * key and value row is read once for the G heads. isa as above. */
void lynn_cpu_attend(const float *q, int64_t ldq, int G, const float *k, const float *v, int64_t ldkv,
		     int64_t T, int hd, float scale, float *sc, float *o, int64_t ldo, enum lynn_cpu_isa isa);

#endif
