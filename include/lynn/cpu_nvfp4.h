/*
 * cpu_nvfp4.h - CPU products with NVFP4 weights that stay 4-bit in memory:
 * the weight is dequantized block by block inside the kernel (AVX2/FMA when
 * the CPU has it, a portable scalar twin otherwise; both give the same sums
 * up to f32 reassociation). Also the CPU twin of the CUDA kernels
 * (kernels/lynn_cuda.h).
 *
 * Y[M,N] = X[M,K] * W[N,K]^T with W = q * s * alpha (weight-formats.md §2).
 */
#ifndef LYNN_CPU_NVFP4_H
#define LYNN_CPU_NVFP4_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/nvfp4.h"

struct lynn_pool;

/* A borrowed view of one quantized linear (e.g. straight into a checkpoint's
 * mmap: lynn_nvfp4_linear's weight/scale data). For a fused 3-D expert
 * tensor, point at expert e: packed + e*N*K/2, scales + e*N*K/16. */
struct lynn_nvfp4_view {
	const uint8_t *packed;  /* N, K/2   e2m1 pairs, low nibble = even k */
	const uint8_t *scales;  /* N, K/16  e4m3 */
	float alpha;            /* tensor multiplier: lynn_nvfp4_tensor_mult() */
	int64_t n, k;           /* K % 16 == 0 */
};

/* Fill a view from a scanned linear (expert `e` of a fused 3-D one, else 0).
 * Returns -LYNN_EFORMAT when the linear failed its checks' basics (shapes,
 * dtypes) or e is out of range. */
int lynn_nvfp4_view_init(struct lynn_nvfp4_view *v, enum lynn_nvfp4_format f,
			 const struct lynn_nvfp4_linear *L, int64_t e, struct lynn_err *err);

/* Y[M,N] (f32, row-major, ld N) = X[M,K] (f32, row-major) * W^T, rows split
 * over `pool` (NULL = caller's thread): lynn_cpu_matmul with an `nv` job. */
int lynn_cpu_nvfp4_matmul(const struct lynn_nvfp4_view *w, const float *x, int64_t m, float *y,
			  struct lynn_pool *pool, struct lynn_err *err);

/* Output rows [r0, r1) only, on the caller's thread, no allocation: for each
 * of the n_tok rows t of x (ldx floats apart), y[t*ldy + r] = (or +=, with
 * accumulate) sum_k W[r][k] x[t][k]. This is what a runner's own
 * parallel-for calls (src/cpu/matmul.c does, for lynn_mm jobs with `nv`). */
void lynn_cpu_nvfp4_rows(const struct lynn_nvfp4_view *w, const float *x, int64_t ldx,
			 int64_t n_tok, int64_t r0, int64_t r1, float *y, int64_t ldy,
			 bool accumulate);

/* Row r's columns c0..c0+len (both multiples of 16) dequantized, times
 * alpha, into out: what src/cpu/matmul.c's prefill kernel multiplies with
 * several tokens at once. */
void lynn_cpu_nvfp4_widen(const struct lynn_nvfp4_view *w, int64_t r, int64_t c0, int64_t len,
			  float *out);

/* The portable scalar twin (reference for the SIMD one and the CUDA ones). */
void lynn_cpu_nvfp4_matmul_ref(const struct lynn_nvfp4_view *w, const float *x, int64_t m,
			       float *y);

/* Does this build/CPU use the AVX2 path? */
bool lynn_cpu_nvfp4_simd(void);

#endif
