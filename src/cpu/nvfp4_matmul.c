/*
 * nvfp4_matmul.c - CPU NVFP4 x f32 products (include/lynn/cpu_nvfp4.h).
 *
 * AVX2: 4 packed bytes (8 weights) are broadcast to the 8 lanes and shifted
 * right by 0, 4, ..., 28, which leaves nibble j of the word in lane j's low
 * bits, i.e. in k order; a table permute (which reads the low 3 bits) gives
 * |q|, and the nibble's sign bit shifted to bit 31 is xor-ed in. One
 * shuffle-port operation per 8 weights, shared by up to 4 activation rows.
 * A row's E4M3 block scales are converted 8 at a time. Block sums are
 * scaled by the block scale, the row sum by alpha: q*s is exact, so only
 * f32 summation rounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include "cpu/simd.h"
#define HAVE_X86 1
#endif

#include "lynn/cpu.h"
#include "lynn/cpu_nvfp4.h"
#include "lynn/pool.h"

/* E4M3 magnitude bits placed in an f32 give 2^-120 times the value
 * (subnormals included); block scales are positive (checked on load). */
static inline float e4m3_fast(uint8_t b)
{
	uint32_t u = (uint32_t)(b & 0x7f) << 20;
	float f;
	memcpy(&f, &u, 4);
	return f * 0x1p120f;
}

int lynn_nvfp4_view_init(struct lynn_nvfp4_view *v, enum lynn_nvfp4_format f,
			 const struct lynn_nvfp4_linear *L, int64_t e, struct lynn_err *err)
{
	int64_t ne = L->n_experts ? L->n_experts : 1;
	float g;

	if (!L->weight || !L->scale || !L->global || L->k % 16 || L->n < 1 ||
	    L->weight->dtype != LYNN_DTYPE_U8 || L->scale->dtype != LYNN_DTYPE_F8_E4M3 ||
	    L->global->dtype != LYNN_DTYPE_F32 || L->global->n_elems != ne ||
	    L->weight->nbytes != (uint64_t)(ne * L->n * L->k / 2) ||
	    L->scale->nbytes != (uint64_t)(ne * L->n * L->k / 16))
		return lynn_errf(err, -LYNN_EFORMAT, "nvfp4: '%s': incomplete or misshapen linear",
				 L->base);
	if (e < 0 || e >= ne)
		return lynn_errf(err, -LYNN_EINVAL, "nvfp4: '%s': expert %lld out of range",
				 L->base, (long long)e);
	memcpy(&g, (const uint8_t *)L->global->data + 4 * e, 4);
	v->packed = (const uint8_t *)L->weight->data + e * L->n * L->k / 2;
	v->scales = (const uint8_t *)L->scale->data + e * L->n * L->k / 16;
	v->alpha = lynn_nvfp4_tensor_mult(f, g);
	v->n = L->n;
	v->k = L->k;
	return 0;
}

/* ===== portable ===== */

static void rows_scalar(const struct lynn_nvfp4_view *w, const float *x, int64_t ldx,
			int64_t n_tok, int64_t r0, int64_t r1, float *y, int64_t ldy, bool accumulate)
{
	const int64_t nb = w->k / 16;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *P = w->packed + r * (w->k / 2), *S = w->scales + r * nb;
		for (int64_t i = 0; i < n_tok; i++) {
			const float *xr = x + i * ldx;
			float acc = 0.0f;
			for (int64_t b = 0; b < nb; b++) {
				float t = 0.0f;
				for (int j = 0; j < 8; j++) {
					uint8_t byte = P[b * 8 + j];
					t += lynn_e2m1_to_f32(byte & 15) * xr[b * 16 + 2 * j];
					t += lynn_e2m1_to_f32(byte >> 4) * xr[b * 16 + 2 * j + 1];
				}
				acc += t * e4m3_fast(S[b]);
			}
			acc *= w->alpha;
			if (accumulate)
				y[i * ldy + r] += acc;
			else
				y[i * ldy + r] = acc;
		}
	}
}

/* ===== AVX2 + FMA ===== */

#ifdef HAVE_X86
/* 4 packed bytes -> the 8 unscaled E2M1 values in k order (low nibble
 * first: nibble j of the little-endian word is element j). Lane j holds the
 * word shifted right by 4j, so its low nibble is element j's code c: the
 * permute reads c's magnitude index (bits 0..2), and c << 28 puts the sign
 * bit at 31 with the index in bits 28..30, which the table entries carry
 * xor-ed in beforehand (entry i is |q_i|'s bits ^ i << 28), so one xor
 * leaves |q_i| with the code's sign. */
__attribute__((target("avx2,fma"))) static inline __m256 dec8_avx2(const uint8_t *p4)
{
	const __m256i tbl = _mm256_setr_epi32(0x00000000, 0x3F000000 ^ 1 << 28, 0x3F800000 ^ 2 << 28,
					      0x3FC00000 ^ 3 << 28, 0x40000000 ^ 4 << 28,
					      0x40400000 ^ 5 << 28, 0x40800000 ^ 6 << 28,
					      0x40C00000 ^ 7u << 28);
	const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
	int32_t w;
	memcpy(&w, p4, 4);
	const __m256i n = _mm256_srlv_epi32(_mm256_set1_epi32(w), shifts);
	const __m256i q = _mm256_permutevar8x32_epi32(tbl, n);
	return _mm256_castsi256_ps(_mm256_xor_si256(q, _mm256_slli_epi32(n, 28)));
}

/* A row's block scales (nb E4M3 bytes, nb % 8 == 0 or not) -> floats. */
__attribute__((target("avx2,fma"))) static void scales_avx2(const uint8_t *S, int64_t nb, float *out)
{
	int64_t b = 0;
	for (; b + 8 <= nb; b += 8) {
		long long v;
		memcpy(&v, S + b, 8);
		__m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
		e = _mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0x7f)), 20);
		_mm256_storeu_ps(out + b, _mm256_mul_ps(_mm256_castsi256_ps(e), _mm256_set1_ps(0x1p120f)));
	}
	for (; b < nb; b++)
		out[b] = e4m3_fast(S[b]);
}

/* Blocks of a row whose scales are converted at a time (K = 16384). */
#define SEG_BLOCKS 1024

/* One row (packed P, block scales sc) against MM tokens (1..4, a constant
 * where it is inlined, so that the accumulators stay in registers); for one
 * or two tokens, two accumulators a token (even and odd blocks) halve the
 * FMA chain. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
row_tokens(const uint8_t *P, const float *sc, int64_t nb, const float *x, int64_t ldx, const int MM,
	   float *out)
{
	const int H = MM <= 2 ? 2 : 1;
	__m256 acc[4][2];
#pragma GCC unroll 4
	for (int j = 0; j < MM; j++)
		acc[j][0] = acc[j][1] = _mm256_setzero_ps();
	for (int64_t b0 = 0; b0 < nb; b0 += H)
#pragma GCC unroll 2
		for (int h = 0; h < H; h++) {
			const int64_t b = b0 + h;
			if (h && b >= nb)
				break;
			const __m256 q0 = dec8_avx2(P + b * 8), q1 = dec8_avx2(P + b * 8 + 4);
			const __m256 s = _mm256_broadcast_ss(sc + b);
#pragma GCC unroll 4
			for (int j = 0; j < MM; j++) {
				const float *xr = x + j * ldx + b * 16;
				__m256 t = _mm256_mul_ps(q1, _mm256_loadu_ps(xr + 8));
				t = _mm256_fmadd_ps(q0, _mm256_loadu_ps(xr), t);
				acc[j][h] = _mm256_fmadd_ps(t, s, acc[j][h]);
			}
		}
#pragma GCC unroll 4
	for (int j = 0; j < MM; j++)
		out[j] = lynn_hsum256(_mm256_add_ps(acc[j][0], acc[j][1]));
}

__attribute__((target("avx2,fma"))) static void
rows_avx2(const struct lynn_nvfp4_view *w, const float *x, int64_t ldx, int64_t n_tok, int64_t r0,
	  int64_t r1, float *y, int64_t ldy, bool accumulate)
{
	const int64_t nb = w->k / 16, k = w->k;
	float sc[SEG_BLOCKS], out[4];

	for (int64_t r = r0; r < r1; r++)
		for (int64_t b0 = 0; b0 < nb; b0 += SEG_BLOCKS) {
			const int64_t ns = nb - b0 < SEG_BLOCKS ? nb - b0 : SEG_BLOCKS;
			const uint8_t *P = w->packed + r * (k / 2) + b0 * 8;
			scales_avx2(w->scales + r * nb + b0, ns, sc);
			for (int64_t i0 = 0; i0 < n_tok; i0 += 4) {
				const int mm = n_tok - i0 < 4 ? (int)(n_tok - i0) : 4;
				const float *xi = x + i0 * ldx + b0 * 16;
				switch (mm) {
				case 1: row_tokens(P, sc, ns, xi, ldx, 1, out); break;
				case 2: row_tokens(P, sc, ns, xi, ldx, 2, out); break;
				case 3: row_tokens(P, sc, ns, xi, ldx, 3, out); break;
				default: row_tokens(P, sc, ns, xi, ldx, 4, out); break;
				}
				for (int j = 0; j < mm; j++) {
					float *yy = y + (i0 + j) * ldy + r, v = out[j] * w->alpha;
					*yy = accumulate || b0 ? *yy + v : v;
				}
			}
		}
}

/* Row r's columns c0..c0+len (multiples of 16) as f32 q*s*alpha. */
__attribute__((target("avx2,fma"))) static void widen_avx2(const struct lynn_nvfp4_view *w,
							  int64_t r, int64_t c0, int64_t len, float *out)
{
	const uint8_t *P = w->packed + r * (w->k / 2) + c0 / 2, *S = w->scales + r * (w->k / 16) + c0 / 16;
	const __m256 a = _mm256_set1_ps(w->alpha);
	for (int64_t b = 0; b < len / 16; b++) {
		const __m256 s = _mm256_mul_ps(_mm256_set1_ps(e4m3_fast(S[b])), a);
		_mm256_storeu_ps(out + 16 * b, _mm256_mul_ps(dec8_avx2(P + 8 * b), s));
		_mm256_storeu_ps(out + 16 * b + 8, _mm256_mul_ps(dec8_avx2(P + 8 * b + 4), s));
	}
}
#endif

bool lynn_cpu_nvfp4_simd(void)
{
#ifdef HAVE_X86
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return false;
#endif
}

void lynn_cpu_nvfp4_rows(const struct lynn_nvfp4_view *w, const float *x, int64_t ldx,
			 int64_t n_tok, int64_t r0, int64_t r1, float *y, int64_t ldy,
			 bool accumulate)
{
#ifdef HAVE_X86
	if (lynn_cpu_nvfp4_simd()) {
		rows_avx2(w, x, ldx, n_tok, r0, r1, y, ldy, accumulate);
		return;
	}
#endif
	rows_scalar(w, x, ldx, n_tok, r0, r1, y, ldy, accumulate);
}

void lynn_cpu_nvfp4_widen(const struct lynn_nvfp4_view *w, int64_t r, int64_t c0, int64_t len,
			  float *out)
{
#ifdef HAVE_X86
	if (lynn_cpu_nvfp4_simd()) {
		widen_avx2(w, r, c0, len, out);
		return;
	}
#endif
	const uint8_t *P = w->packed + r * (w->k / 2) + c0 / 2, *S = w->scales + r * (w->k / 16) + c0 / 16;
	for (int64_t i = 0; i < len; i++) {
		uint8_t b = P[i / 2];
		out[i] = lynn_e2m1_to_f32((i & 1) ? b >> 4 : b & 15) * (e4m3_fast(S[i / 16]) * w->alpha);
	}
}

void lynn_cpu_nvfp4_matmul_ref(const struct lynn_nvfp4_view *w, const float *x, int64_t m,
			       float *y)
{
	rows_scalar(w, x, w->k, m, 0, w->n, y, w->n, false);
}

int lynn_cpu_nvfp4_matmul(const struct lynn_nvfp4_view *w, const float *x, int64_t m, float *y,
			  struct lynn_pool *pool, struct lynn_err *err)
{
	if (w->k % 16 || w->n < 1 || m < 1)
		return lynn_errf(err, -LYNN_EINVAL, "nvfp4: matmul: bad shape n %lld k %lld m %lld",
				 (long long)w->n, (long long)w->k, (long long)m);
	struct lynn_mm mm = { .n_out = w->n, .n_in = w->k, .x = x, .ldx = w->k, .y = y, .ldy = w->n,
			      .n_tok = m, .nv = w };
	lynn_cpu_matmul(pool, &mm, LYNN_CPU_AUTO);
	return 0;
}
