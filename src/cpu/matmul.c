/* matmul.c - threaded y = W x with BF16/F16/F32 weights (include/lynn/cpu.h).
 *
 * Work split: each product is cut into blocks of output rows; all blocks of
 * all products of one call go through one lynn_pool_run.
 *
 * Inside a block, two shapes:
 *  - few tokens (decode): four weight rows at a time, widened to f32 in
 *    registers and dotted with two tokens' x at a time; the weights stream
 *    once.
 *  - many tokens (prefill): four weight rows are widened a column chunk at a
 *    time into a small f32 tile (stays in L1) that every token's x then
 *    reuses, two tokens at a time, so each weight byte is read once per call
 *    however many tokens there are.
 */
#include "lynn/cpu.h"
#include "lynn/cpu_nvfp4.h"
#include "lynn/ggml_quants.h"
#include "lynn/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

#define ROWS 4            /* weight rows per micro-tile */
#define CHUNK 256         /* columns widened per tile (4 x 256 f32 = 4 KiB) */
#define DECODE_MAX_TOK 4  /* up to this many tokens: in-register path (pairs of tokens) */
#define PF_DIST 4096      /* bytes of weights prefetched ahead when decoding */
#define QUANT_FEW_TOK 4   /* NVFP4 / ggml weights: up to this many tokens, their row kernels */

/* ===== scalar widening (kernel-local, inlined) ===== */

static inline float bf16_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
	return v.f;
}

/* IEEE half -> float, exact (subnormals, inf, NaN). */
static inline float f16_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else { /* subnormal: normalise */
			int e = -1;
			do { e++; man <<= 1; } while (!(man & 0x400));
			bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
		}
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | (man << 13);
	} else {
		bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	union { uint32_t u; float f; } v = { .u = bits };
	return v.f;
}

static inline void widen(enum lynn_dtype dt, const void *w, int64_t off, int64_t n, float *out)
{
	if (dt == LYNN_DTYPE_F32) {
		memcpy(out, (const float *)w + off, (size_t)n * sizeof(float));
	} else if (dt == LYNN_DTYPE_BF16) {
		const uint16_t *p = (const uint16_t *)w + off;
		for (int64_t i = 0; i < n; i++)
			out[i] = bf16_f32(p[i]);
	} else {
		const uint16_t *p = (const uint16_t *)w + off;
		for (int64_t i = 0; i < n; i++)
			out[i] = f16_f32(p[i]);
	}
}

void lynn_cpu_row_to_f32(enum lynn_dtype dt, const void *w, int64_t row, int64_t n, float *out)
{
	widen(dt, w, row * n, n, out);
}

bool lynn_cpu_wdtype_ok(enum lynn_dtype dt)
{
	return dt == LYNN_DTYPE_F32 || dt == LYNN_DTYPE_BF16 || dt == LYNN_DTYPE_F16;
}

static inline size_t esize(enum lynn_dtype dt)
{
	return dt == LYNN_DTYPE_F32 ? 4 : 2;
}

/* ===== portable twin ===== */

static void block_portable(const struct lynn_mm *m, int64_t r0, int64_t r1)
{
	float tile[ROWS][CHUNK];
	for (int64_t o = r0; o < r1; o += ROWS) {
		int nr = (int)LYNN_MIN(ROWS, r1 - o);
		for (int64_t c0 = 0; c0 < m->n_in; c0 += CHUNK) {
			int64_t len = LYNN_MIN(CHUNK, m->n_in - c0);
			for (int r = 0; r < nr; r++)
				widen(m->wdt, m->w, (o + r) * m->n_in + c0, len, tile[r]);
			for (int64_t t = 0; t < m->n_tok; t++) {
				const float *x = m->x + t * m->ldx + c0;
				float *y = m->y + t * m->ldy + o;
				for (int r = 0; r < nr; r++) {
					float s = 0.0f;
					for (int64_t i = 0; i < len; i++)
						s += tile[r][i] * x[i];
					if (c0 == 0 && !m->accumulate)
						y[r] = s;
					else
						y[r] += s;
				}
			}
		}
	}
}

/* ===== AVX2 / FMA / F16C ===== */
#if HAVE_X86
#include <cpuid.h>

#include "cpu/simd.h"
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))

AVX2_FN static inline __m256 ld_bf16(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2_FN static inline __m256 ld_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Widen n values (n any) into out. */
AVX2_FN static void widen_avx2(enum lynn_dtype dt, const void *w, int64_t off, int64_t n, float *out)
{
	int64_t i = 0;
	if (dt == LYNN_DTYPE_BF16) {
		const uint16_t *p = (const uint16_t *)w + off;
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(out + i, ld_bf16(p + i));
	} else if (dt == LYNN_DTYPE_F16) {
		const uint16_t *p = (const uint16_t *)w + off;
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(out + i, ld_f16(p + i));
	}
	if (i < n)
		widen(dt, w, off + i, n - i, out + i);
}

/* Decode: dots of up to 4 rows with one x, widening in registers.
 * DEF_DOT4 instantiates it per weight type (LD loads 8 weights as f32). */
#define DEF_DOT4(NAME, T, LD)                                                       \
	AVX2_FN static void NAME(const T *w0, const T *w1, const T *w2, const T *w3,   \
				 const float *x, int64_t n, float out[4])            \
	{                                                                           \
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;          \
		int64_t i = 0;                                                      \
		for (; i + 8 <= n; i += 8) {                                        \
			__m256 xv = _mm256_loadu_ps(x + i);                          \
			a0 = _mm256_fmadd_ps(LD(w0 + i), xv, a0);                   \
			a1 = _mm256_fmadd_ps(LD(w1 + i), xv, a1);                   \
			a2 = _mm256_fmadd_ps(LD(w2 + i), xv, a2);                   \
			a3 = _mm256_fmadd_ps(LD(w3 + i), xv, a3);                   \
		}                                                                   \
		out[0] = lynn_hsum256(a0); out[1] = lynn_hsum256(a1);              \
		out[2] = lynn_hsum256(a2); out[3] = lynn_hsum256(a3);              \
		(void)i;                                                            \
	}

/* The same for two tokens: each widened weight vector is used twice, so a
 * batch of decoding sequences widens the weights once per pair of tokens.
 * Each token's sums take the same steps as in DOT4 (identical results). */
#define DEF_DOT4X2(NAME, T, LD)                                                     \
	AVX2_FN static void NAME(const T *w0, const T *w1, const T *w2, const T *w3,   \
				 const float *x, const float *x2, int64_t n, float out[4], \
				 float out2[4])                                      \
	{                                                                           \
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;          \
		__m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                           \
		for (int64_t i = 0; i + 8 <= n; i += 8) {                           \
			__m256 xv = _mm256_loadu_ps(x + i), yv = _mm256_loadu_ps(x2 + i), w; \
			w = LD(w0 + i); a0 = _mm256_fmadd_ps(w, xv, a0); b0 = _mm256_fmadd_ps(w, yv, b0); \
			w = LD(w1 + i); a1 = _mm256_fmadd_ps(w, xv, a1); b1 = _mm256_fmadd_ps(w, yv, b1); \
			w = LD(w2 + i); a2 = _mm256_fmadd_ps(w, xv, a2); b2 = _mm256_fmadd_ps(w, yv, b2); \
			w = LD(w3 + i); a3 = _mm256_fmadd_ps(w, xv, a3); b3 = _mm256_fmadd_ps(w, yv, b3); \
		}                                                                   \
		out[0] = lynn_hsum256(a0); out[1] = lynn_hsum256(a1);              \
		out[2] = lynn_hsum256(a2); out[3] = lynn_hsum256(a3);              \
		out2[0] = lynn_hsum256(b0); out2[1] = lynn_hsum256(b1);            \
		out2[2] = lynn_hsum256(b2); out2[3] = lynn_hsum256(b3);            \
	}

/* One row, 32 columns per step over four accumulators: a single
 * sequential stream per row keeps the hardware prefetcher ahead. */
#define DEF_DOT1(NAME, T, LD)                                                       \
	AVX2_FN static float NAME(const T *w, const float *x, int64_t n)            \
	{                                                                           \
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;          \
		int64_t i = 0;                                                      \
		for (; i + 32 <= n; i += 32) {                                      \
			_mm_prefetch((const char *)(w + i) + PF_DIST, _MM_HINT_T0);      \
			a0 = _mm256_fmadd_ps(LD(w + i), _mm256_loadu_ps(x + i), a0);           \
			a1 = _mm256_fmadd_ps(LD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);   \
			a2 = _mm256_fmadd_ps(LD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2); \
			a3 = _mm256_fmadd_ps(LD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3); \
		}                                                                   \
		for (; i + 8 <= n; i += 8)                                          \
			a0 = _mm256_fmadd_ps(LD(w + i), _mm256_loadu_ps(x + i), a0);           \
		return lynn_hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
	}

#define LD_F32(p) _mm256_loadu_ps(p)
DEF_DOT1(dot1_bf16, uint16_t, ld_bf16)
DEF_DOT1(dot1_f16, uint16_t, ld_f16)
DEF_DOT1(dot1_f32, float, LD_F32)
DEF_DOT4(dot4_bf16, uint16_t, ld_bf16)
DEF_DOT4(dot4_f16, uint16_t, ld_f16)
DEF_DOT4(dot4_f32, float, LD_F32)
DEF_DOT4X2(dot4x2_bf16, uint16_t, ld_bf16)
DEF_DOT4X2(dot4x2_f16, uint16_t, ld_f16)
DEF_DOT4X2(dot4x2_f32, float, LD_F32)

AVX2_FN static void block_decode_avx2(const struct lynn_mm *m, int64_t r0, int64_t r1)
{
	if (m->n_tok == 1) {
		int64_t n = m->n_in, nv = n & ~(int64_t)7;
		size_t es = esize(m->wdt);
		const char *wb = m->w;
		for (int64_t o = r0; o < r1; o++) {
			const void *wr = wb + (size_t)(o * n) * es;
			float s;
			if (m->wdt == LYNN_DTYPE_BF16)
				s = dot1_bf16(wr, m->x, nv);
			else if (m->wdt == LYNN_DTYPE_F16)
				s = dot1_f16(wr, m->x, nv);
			else
				s = dot1_f32(wr, m->x, nv);
			if (nv < n) {
				float tl[8];
				widen(m->wdt, m->w, o * n + nv, n - nv, tl);
				for (int64_t i = nv; i < n; i++)
					s += tl[i - nv] * m->x[i];
			}
			m->y[o] = m->accumulate ? m->y[o] + s : s;
		}
		return;
	}
	int64_t n = m->n_in, nv = n & ~(int64_t)7;
	size_t es = esize(m->wdt);
	const char *wb = m->w;
	for (int64_t o = r0; o < r1; o += ROWS) {
		int nr = (int)LYNN_MIN(ROWS, r1 - o);
		const void *wr[ROWS];
		for (int r = 0; r < ROWS; r++) /* short tiles repeat the last row */
			wr[r] = wb + (size_t)((o + LYNN_MIN(r, nr - 1)) * n) * es;
		for (int64_t t = 0; t < m->n_tok; t += 2) {
			const bool pair = t + 1 < m->n_tok;
			const float *x = m->x + t * m->ldx, *x2 = pair ? x + m->ldx : NULL;
			float s[2][4];
			if (pair && m->wdt == LYNN_DTYPE_BF16)
				dot4x2_bf16(wr[0], wr[1], wr[2], wr[3], x, x2, nv, s[0], s[1]);
			else if (pair && m->wdt == LYNN_DTYPE_F16)
				dot4x2_f16(wr[0], wr[1], wr[2], wr[3], x, x2, nv, s[0], s[1]);
			else if (pair)
				dot4x2_f32(wr[0], wr[1], wr[2], wr[3], x, x2, nv, s[0], s[1]);
			else if (m->wdt == LYNN_DTYPE_BF16)
				dot4_bf16(wr[0], wr[1], wr[2], wr[3], x, nv, s[0]);
			else if (m->wdt == LYNN_DTYPE_F16)
				dot4_f16(wr[0], wr[1], wr[2], wr[3], x, nv, s[0]);
			else
				dot4_f32(wr[0], wr[1], wr[2], wr[3], x, nv, s[0]);
			for (int k = 0; k < (pair ? 2 : 1); k++) {
				const float *xk = k ? x2 : x;
				float *y = m->y + (t + k) * m->ldy + o;
				for (int r = 0; r < nr; r++) {
					if (nv < n) { /* tail */
						float tl[8];
						widen(m->wdt, m->w, (o + r) * n + nv, n - nv, tl);
						for (int64_t i = nv; i < n; i++)
							s[k][r] += tl[i - nv] * xk[i];
					}
					y[r] = m->accumulate ? y[r] + s[k][r] : s[k][r];
				}
			}
		}
	}
}

/* Prefill: an outer-product micro-kernel. A tile of 16 weight rows x 256
 * columns is widened and transposed once into tT[col][16] (16 KiB, stays in
 * L1); then for up to 6 tokens at a time, 12 accumulators hold y[t][o..o+16]
 * and each column adds tT[col] * x[t][col] (broadcast): no horizontal sums,
 * 2 tile loads + 6 broadcasts per 12 FMAs. */
#define OR 16
#define OC 256
#define NT_MAX 6

AVX2_FN static inline void transpose8(__m256 r[8])
{
	__m256 t[8], u[8];
	_Pragma("GCC unroll 8")
	for (int k = 0; k < 4; k++) {
		t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
		t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
	}
	_Pragma("GCC unroll 8")
	for (int k = 0; k < 2; k++) {
		u[4 * k + 0] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
		u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	_Pragma("GCC unroll 8")
	for (int k = 0; k < 4; k++) {
		r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
		r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
	}
}

/* Row r's columns c0..c0+len as f32: widened, or for a quantized weight
 * dequantized (c0 is a multiple of OC, so of every block size). */
AVX2_FN static void tile_row(const struct lynn_mm *m, int64_t r, int64_t c0, int64_t len, float *out)
{
	if (m->nv)
		lynn_cpu_nvfp4_widen(m->nv, r, c0, len, out);
	else if (m->gg)
		lynn_ggml_dequant(m->gg->type,
				  m->gg->data + (size_t)r * m->gg->row_bytes + lynn_ggml_row_bytes(m->gg->type, c0),
				  len, out);
	else
		widen_avx2(m->wdt, m->w, r * m->n_in + c0, len, out);
}

/* Widen rows o..o+nr (zeros past nr) x columns c0..c0+len into tT[len'][16]. */
AVX2_FN static void pack_tile(const struct lynn_mm *m, int64_t o, int nr, int64_t c0, int64_t len,
			      float *tT)
{
	float rows[8][OC] __attribute__((aligned(32)));
	int64_t lp = (len + 7) & ~(int64_t)7;
	for (int half = 0; half < 2; half++) {
		for (int r = 0; r < 8; r++) {
			int rr = half * 8 + r;
			if (rr < nr)
				tile_row(m, o + rr, c0, len, rows[r]);
			else
				memset(rows[r], 0, (size_t)len * sizeof(float));
			for (int64_t i = len; i < lp; i++)
				rows[r][i] = 0.0f;
		}
		for (int64_t i = 0; i < lp; i += 8) {
			__m256 v[8];
			_Pragma("GCC unroll 8")
			for (int r = 0; r < 8; r++)
				v[r] = _mm256_load_ps(rows[r] + i);
			transpose8(v);
			_Pragma("GCC unroll 8")
			for (int j = 0; j < 8; j++)
				_mm256_store_ps(tT + (i + j) * OR + half * 8, v[j]);
		}
	}
}

__attribute__((always_inline)) AVX2_FN static inline void
micro(const float *tT, int64_t len, const float *x, int64_t ldx, float *y, int64_t ldy, int nr,
      bool first, const int NT)
{
	__m256 a[NT_MAX][2];
	_Pragma("GCC unroll 6")
	for (int t = 0; t < NT; t++)
		a[t][0] = a[t][1] = _mm256_setzero_ps();
	for (int64_t i = 0; i < len; i++) {
		__m256 w0 = _mm256_load_ps(tT + i * OR), w1 = _mm256_load_ps(tT + i * OR + 8);
		_Pragma("GCC unroll 6")
	for (int t = 0; t < NT; t++) {
			__m256 xb = _mm256_broadcast_ss(x + t * ldx + i);
			a[t][0] = _mm256_fmadd_ps(w0, xb, a[t][0]);
			a[t][1] = _mm256_fmadd_ps(w1, xb, a[t][1]);
		}
	}
	_Pragma("GCC unroll 6")
	for (int t = 0; t < NT; t++) {
		float *yt = y + t * ldy;
		if (nr == OR) {
			if (!first) {
				a[t][0] = _mm256_add_ps(a[t][0], _mm256_loadu_ps(yt));
				a[t][1] = _mm256_add_ps(a[t][1], _mm256_loadu_ps(yt + 8));
			}
			_mm256_storeu_ps(yt, a[t][0]);
			_mm256_storeu_ps(yt + 8, a[t][1]);
		} else {
			float buf[OR];
			_mm256_storeu_ps(buf, a[t][0]);
			_mm256_storeu_ps(buf + 8, a[t][1]);
			for (int r = 0; r < nr; r++)
				yt[r] = first ? buf[r] : yt[r] + buf[r];
		}
	}
}

AVX2_FN static void block_prefill_avx2(const struct lynn_mm *m, int64_t r0, int64_t r1)
{
	float tT[OC * OR] __attribute__((aligned(32)));
	for (int64_t o = r0; o < r1; o += OR) {
		int nr = (int)LYNN_MIN(OR, r1 - o);
		for (int64_t c0 = 0; c0 < m->n_in; c0 += OC) {
			int64_t len = LYNN_MIN(OC, m->n_in - c0);
			bool first = c0 == 0 && !m->accumulate;
			pack_tile(m, o, nr, c0, len, tT);
			for (int64_t t = 0; t < m->n_tok; t += NT_MAX) {
				const float *x = m->x + t * m->ldx + c0;
				float *y = m->y + t * m->ldy + o;
				switch (LYNN_MIN(NT_MAX, m->n_tok - t)) {
				case 6: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 6); break;
				case 5: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 5); break;
				case 4: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 4); break;
				case 3: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 3); break;
				case 2: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 2); break;
				default: micro(tT, len, x, m->ldx, y, m->ldy, nr, first, 1); break;
				}
			}
		}
	}
}
#endif /* HAVE_X86 */

/* ===== delta rule ===== */

static void delta_portable(float *S, int dk, int dv, const float *k, const float *q, const float *v,
			   float beta, float decay, float *o)
{
	float mv[dv], delta[dv];
	memset(mv, 0, sizeof mv);
	for (int a = 0; a < dk; a++) {
		float *row = S + (int64_t)a * dv;
		for (int j = 0; j < dv; j++) {
			row[j] *= decay;
			mv[j] += row[j] * k[a];
		}
	}
	for (int j = 0; j < dv; j++) {
		delta[j] = (v[j] - mv[j]) * beta;
		o[j] = 0.0f;
	}
	for (int a = 0; a < dk; a++) {
		float *row = S + (int64_t)a * dv;
		for (int j = 0; j < dv; j++) {
			row[j] += k[a] * delta[j];
			o[j] += row[j] * q[a];
		}
	}
}

#if HAVE_X86
/* dv a multiple of 8, at most 256 */
AVX2_FN static void delta_avx2(float *S, int dk, int dv, const float *k, const float *q,
			       const float *v, float beta, float decay, float *o)
{
	__m256 acc[32];
	int nb = dv / 8;
	__m256 dc = _mm256_set1_ps(decay);
	for (int b = 0; b < nb; b++)
		acc[b] = _mm256_setzero_ps();
	for (int a = 0; a < dk; a++) {
		float *row = S + (int64_t)a * dv;
		__m256 ka = _mm256_set1_ps(k[a]);
		for (int b = 0; b < nb; b++) {
			__m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * b), dc);
			_mm256_storeu_ps(row + 8 * b, r);
			acc[b] = _mm256_fmadd_ps(r, ka, acc[b]);
		}
	}
	__m256 bt = _mm256_set1_ps(beta);
	for (int b = 0; b < nb; b++) {
		acc[b] = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + 8 * b), acc[b]), bt);
		_mm256_storeu_ps(o + 8 * b, _mm256_setzero_ps());
	}
	for (int a = 0; a < dk; a++) {
		float *row = S + (int64_t)a * dv;
		__m256 ka = _mm256_set1_ps(k[a]), qa = _mm256_set1_ps(q[a]);
		for (int b = 0; b < nb; b++) {
			__m256 r = _mm256_fmadd_ps(ka, acc[b], _mm256_loadu_ps(row + 8 * b));
			_mm256_storeu_ps(row + 8 * b, r);
			_mm256_storeu_ps(o + 8 * b, _mm256_fmadd_ps(r, qa, _mm256_loadu_ps(o + 8 * b)));
		}
	}
}
#endif

void lynn_cpu_delta_step(float *S, int dk, int dv, const float *k, const float *q, const float *v,
			 float beta, float decay, float *o, enum lynn_cpu_isa isa)
{
#if HAVE_X86
	if (isa == LYNN_CPU_AUTO)
		isa = lynn_cpu_best();
	if (isa == LYNN_CPU_AVX2 && dv % 8 == 0 && dv <= 256 && lynn_cpu_has(LYNN_CPU_AVX2)) {
		delta_avx2(S, dk, dv, k, q, v, beta, decay, o);
		return;
	}
#endif
	(void)isa;
	delta_portable(S, dk, dv, k, q, v, beta, decay, o);
}

/* ===== attention ===== */

void lynn_cpu_softmax(float *v, int64_t n)
{
	float mx = -INFINITY, sum = 0.0f;
	for (int64_t i = 0; i < n; i++)
		mx = v[i] > mx ? v[i] : mx;
	for (int64_t i = 0; i < n; i++) {
		v[i] = expf(v[i] - mx);
		sum += v[i];
	}
	for (int64_t i = 0; i < n; i++)
		v[i] /= sum;
}

/* sc[h * T + t] = scale * q_h . k_t, each key row read once for the G heads */
static void attend_scores_portable(const float *q, int64_t ldq, int G, const float *k, int64_t ldkv, int64_t T,
				   int hd, float scale, float *sc)
{
	for (int64_t t = 0; t < T; t++) {
		const float *kt = k + t * ldkv;
		for (int h = 0; h < G; h++) {
			const float *qh = q + h * ldq;
			float part[8] = { 0 }, d = 0.0f;
			int j = 0;
			for (; j + 8 <= hd; j += 8) /* 8 running sums: a fixed trip count vectorises */
				for (int l = 0; l < 8; l++)
					part[l] += qh[j + l] * kt[j + l];
			for (int l = 0; l < 8; l++)
				d += part[l];
			for (; j < hd; j++)
				d += qh[j] * kt[j];
			sc[h * T + t] = d * scale;
		}
	}
}

/* o_h += sum_t sc[h * T + t] v_t, each value row read once for the G heads */
static void attend_values_portable(const float *sc, int G, const float *v, int64_t ldkv, int64_t T, int hd,
				   float *o, int64_t ldo)
{
	for (int64_t t = 0; t < T; t++) {
		const float *vt = v + t * ldkv;
		for (int h = 0; h < G; h++) {
			float *oh = o + h * ldo, p = sc[h * T + t];
			for (int j = 0; j < hd; j++)
				oh[j] += p * vt[j];
		}
	}
}

#if HAVE_X86
/* the same, hd a multiple of 8 */
AVX2_FN static void attend_scores_avx2(const float *q, int64_t ldq, int G, const float *k, int64_t ldkv,
				       int64_t T, int hd, float scale, float *sc)
{
	const int nb = hd / 8;
	for (int64_t t = 0; t < T; t++) {
		const float *kt = k + t * ldkv;
		for (int h = 0; h < G; h++) {
			const float *qh = q + h * ldq;
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			int b = 0;
			for (; b + 2 <= nb; b += 2) { /* two chains of FMAs */
				a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * b), _mm256_loadu_ps(kt + 8 * b), a0);
				a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * b + 8), _mm256_loadu_ps(kt + 8 * b + 8), a1);
			}
			if (b < nb)
				a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * b), _mm256_loadu_ps(kt + 8 * b), a0);
			sc[h * T + t] = lynn_hsum256(_mm256_add_ps(a0, a1)) * scale;
		}
	}
}

AVX2_FN static void attend_values_avx2(const float *sc, int G, const float *v, int64_t ldkv, int64_t T, int hd,
				       float *o, int64_t ldo)
{
	const int nb = hd / 8;
	for (int64_t t = 0; t < T; t++) {
		const float *vt = v + t * ldkv;
		for (int h = 0; h < G; h++) {
			float *oh = o + h * ldo;
			const __m256 p = _mm256_set1_ps(sc[h * T + t]);
			for (int b = 0; b < nb; b++)
				_mm256_storeu_ps(oh + 8 * b, _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * b),
									     _mm256_loadu_ps(oh + 8 * b)));
		}
	}
}
#endif

void lynn_cpu_attend(const float *q, int64_t ldq, int G, const float *k, const float *v, int64_t ldkv,
		     int64_t T, int hd, float scale, float *sc, float *o, int64_t ldo, enum lynn_cpu_isa isa)
{
	bool avx2 = false;
#if HAVE_X86
	if (isa == LYNN_CPU_AUTO)
		isa = lynn_cpu_best();
	avx2 = isa == LYNN_CPU_AVX2 && hd % 8 == 0 && lynn_cpu_has(LYNN_CPU_AVX2);
	if (avx2)
		attend_scores_avx2(q, ldq, G, k, ldkv, T, hd, scale, sc);
#endif
	if (!avx2)
		attend_scores_portable(q, ldq, G, k, ldkv, T, hd, scale, sc);
	for (int h = 0; h < G; h++) {
		lynn_cpu_softmax(sc + h * T, T);
		memset(o + h * ldo, 0, (size_t)hd * sizeof *o);
	}
#if HAVE_X86
	if (avx2)
		attend_values_avx2(sc, G, v, ldkv, T, hd, o, ldo);
#endif
	if (!avx2)
		attend_values_portable(sc, G, v, ldkv, T, hd, o, ldo);
}

/* ===== dispatch ===== */

bool lynn_cpu_has(enum lynn_cpu_isa isa)
{
	if (isa != LYNN_CPU_AVX2)
		return true;
#if HAVE_X86
	unsigned a, b, c, d;
	__builtin_cpu_init();
	/* F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c") */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29)))
		return false;
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return false;
#endif
}

enum lynn_cpu_isa lynn_cpu_best(void)
{
	return lynn_cpu_has(LYNN_CPU_AVX2) ? LYNN_CPU_AVX2 : LYNN_CPU_PORTABLE;
}

const char *lynn_cpu_isa_name(enum lynn_cpu_isa isa)
{
	switch (isa) {
	case LYNN_CPU_AVX2: return "avx2";
	case LYNN_CPU_PORTABLE: return "portable";
	default: return "auto";
	}
}

struct task {
	int job;
	int64_t r0, r1;
};

struct run {
	const struct lynn_mm *mm;
	const struct task *tasks;
	enum lynn_cpu_isa isa;
};

static void run_task(void *ud, int64_t i, int tid)
{
	const struct run *rn = ud;
	const struct task *tk = &rn->tasks[i];
	const struct lynn_mm *m = &rn->mm[tk->job];
	(void)tid;
#if HAVE_X86
	/* prefill on quantized weights: the outer-product kernel, dequantizing
	 * its tiles */
	if ((m->nv || m->gg) && rn->isa == LYNN_CPU_AVX2 && m->n_tok > QUANT_FEW_TOK) {
		block_prefill_avx2(m, tk->r0, tk->r1);
		return;
	}
#endif
	if (m->nv) {
		lynn_cpu_nvfp4_rows(m->nv, m->x, m->ldx, m->n_tok, tk->r0, tk->r1, m->y, m->ldy,
				    m->accumulate);
		return;
	}
	if (m->gg) {
		lynn_ggml_rows(m->gg, m->x, m->ldx, m->n_tok, tk->r0, tk->r1, m->y, m->ldy, m->accumulate);
		return;
	}
#if HAVE_X86
	if (rn->isa == LYNN_CPU_AVX2) {
		if (m->n_tok <= DECODE_MAX_TOK)
			block_decode_avx2(m, tk->r0, tk->r1);
		else
			block_prefill_avx2(m, tk->r0, tk->r1);
		return;
	}
#endif
	block_portable(m, tk->r0, tk->r1);
}

/* Rows per task: about 64 KiB of weights (decode) and a multiple of ROWS,
 * smaller when a call has too few blocks to feed the pool. */
static int64_t block_rows(const struct lynn_mm *m, int64_t total_bytes, int n_threads)
{
	int64_t row_bytes = m->nv ? m->n_in * 9 / 16
			    : m->gg ? (int64_t)m->gg->row_bytes : m->n_in * (int64_t)esize(m->wdt);
	int64_t target = 64 * 1024;
	if (n_threads > 1 && total_bytes / target < 4 * n_threads)
		target = LYNN_MAX(total_bytes / (4 * n_threads), 4096);
	int64_t rows = target / LYNN_MAX(row_bytes, 1);
	rows = LYNN_MAX(16, rows & ~(int64_t)15); /* whole prefill tiles */
	return rows;
}

void lynn_cpu_matmul_many(struct lynn_pool *pool, const struct lynn_mm *mm, int n,
			  enum lynn_cpu_isa isa)
{
	if (isa == LYNN_CPU_AUTO || !lynn_cpu_has(isa))
		isa = lynn_cpu_best();
	int nt = pool ? lynn_pool_size(pool) : 1;
	int64_t total = 0, n_tasks = 0;
	for (int j = 0; j < n; j++)
		if (mm[j].n_tok > 0)
			total += mm[j].n_out * (mm[j].nv ? mm[j].n_in * 9 / 16
						: mm[j].gg ? (int64_t)mm[j].gg->row_bytes
						: mm[j].n_in * (int64_t)esize(mm[j].wdt));
	int64_t rows[n > 0 ? n : 1];
	for (int j = 0; j < n; j++) {
		rows[j] = block_rows(&mm[j], total, nt);
		if (mm[j].n_tok > 0)
			n_tasks += (mm[j].n_out + rows[j] - 1) / rows[j];
	}
	if (n_tasks == 0)
		return;
	struct task stack_tasks[256];
	struct task *tasks = n_tasks <= 256 ? stack_tasks : malloc((size_t)n_tasks * sizeof *tasks);
	struct run rn = { .mm = mm, .tasks = tasks, .isa = isa };
	if (!tasks) { /* no memory for the task list: one task per product */
		for (int j = 0; j < n; j++) {
			struct task one = { j, 0, mm[j].n_out };
			struct run r1 = { .mm = mm, .tasks = &one, .isa = isa };
			if (mm[j].n_tok > 0)
				run_task(&r1, 0, 0);
		}
		return;
	}
	int64_t k = 0;
	for (int j = 0; j < n; j++) {
		if (mm[j].n_tok <= 0)
			continue;
		for (int64_t r = 0; r < mm[j].n_out; r += rows[j]) {
			tasks[k].job = j;
			tasks[k].r0 = r;
			tasks[k].r1 = LYNN_MIN(mm[j].n_out, r + rows[j]);
			k++;
		}
	}
	lynn_pool_run(pool, n_tasks, run_task, &rn);
	if (tasks != stack_tasks)
		free(tasks);
}

void lynn_cpu_matmul(struct lynn_pool *pool, const struct lynn_mm *mm, enum lynn_cpu_isa isa)
{
	lynn_cpu_matmul_many(pool, mm, 1, isa);
}
