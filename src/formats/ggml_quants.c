/*
 * ggml_quants.c - ggml block dequantization and products with quantized
 * weights (include/lynn/ggml_quants.h). Block layouts: weight-formats.md
 * §4.3 (ggml-common.h). Each value is computed with the same f32 operations
 * in the same order as gguf-py's gguf.quants (e.g. Q4_K: (d*sc)*q - dmin*m),
 * so the results are bit-identical to it (tests/check_ggufrun.c).
 */
#include "lynn/ggml_quants.h"

#include <string.h>

#include "lynn/st.h"

#define QK 32
#define QKK 256

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline float h2f(const uint8_t *p) { return lynn_f16_to_f32(rd16(p)); }

static const struct {
	int blck;
	int bytes;
} INFO[] = {
	[LYNN_GGML_F32] = { 1, 4 },     [LYNN_GGML_F16] = { 1, 2 },     [LYNN_GGML_Q4_0] = { QK, 18 },
	[LYNN_GGML_Q4_1] = { QK, 20 },  [LYNN_GGML_Q5_0] = { QK, 22 },  [LYNN_GGML_Q5_1] = { QK, 24 },
	[LYNN_GGML_Q8_0] = { QK, 34 },  [LYNN_GGML_Q4_K] = { QKK, 144 }, [LYNN_GGML_Q5_K] = { QKK, 176 },
	[LYNN_GGML_Q6_K] = { QKK, 210 }, [LYNN_GGML_BF16] = { 1, 2 },
};

bool lynn_ggml_type_ok(uint32_t type)
{
	return type < sizeof INFO / sizeof INFO[0] && INFO[type].blck > 0;
}

int lynn_ggml_block_elems(uint32_t type)
{
	return lynn_ggml_type_ok(type) ? INFO[type].blck : 0;
}

size_t lynn_ggml_row_bytes(uint32_t type, int64_t n)
{
	if (!lynn_ggml_type_ok(type) || n < 0 || n % INFO[type].blck)
		return 0;
	return (size_t)(n / INFO[type].blck) * (size_t)INFO[type].bytes;
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

static void dq_q4_0(const uint8_t *b, float *y)
{
	float d = h2f(b);
	const uint8_t *qs = b + 2;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)((int)(qs[j] & 15) - 8);
		y[j + QK / 2] = d * (float)((int)(qs[j] >> 4) - 8);
	}
}

static void dq_q4_1(const uint8_t *b, float *y)
{
	float d = h2f(b), m = h2f(b + 2);
	const uint8_t *qs = b + 4;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)(qs[j] & 15) + m;
		y[j + QK / 2] = d * (float)(qs[j] >> 4) + m;
	}
}

static void dq_q5(const uint8_t *b, float *y, bool has_min)
{
	float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
	const uint8_t *p = b + (has_min ? 4 : 2);
	uint32_t qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	const uint8_t *qs = p + 4;
	for (int j = 0; j < QK / 2; j++) {
		int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
		int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
		if (has_min) {
			y[j] = d * (float)lo + m;
			y[j + QK / 2] = d * (float)hi + m;
		} else {
			y[j] = d * (float)(lo - 16);
			y[j + QK / 2] = d * (float)(hi - 16);
		}
	}
}

static void dq_q8_0(const uint8_t *b, float *y)
{
	float d = h2f(b);
	for (int j = 0; j < QK; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q4_K: {d, dmin, scales[12], qs[128]}; Q5_K adds qh[32] before qs. */
static void dq_qk45(const uint8_t *b, float *y, bool five)
{
	float d = h2f(b), dmin = h2f(b + 2);
	const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
	for (int c = 0; c < 4; c++) {
		for (int h = 0; h < 2; h++) {
			int s = 2 * c + h;
			uint8_t a, mm;
			scale_min_k4(s, sc, &a, &mm);
			float dl = d * (float)a, ml = dmin * (float)mm;
			for (int l = 0; l < 32; l++) {
				int q = h ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
				if (five)
					q |= ((qh[l] >> s) & 1) << 4;
				y[64 * c + 32 * h + l] = dl * (float)q - ml;
			}
		}
	}
}

/* Q6_K: {ql[128], qh[64], int8 scales[16], d}. */
static void dq_q6_k(const uint8_t *b, float *y)
{
	float d = h2f(b + 208);
	for (int half = 0; half < 2; half++) {
		const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
		const int8_t *sc = (const int8_t *)(b + 192) + 8 * half;
		float *yy = y + 128 * half;
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
			int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
			int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
			int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
			yy[l] = (d * (float)sc[is + 0]) * (float)q1;
			yy[l + 32] = (d * (float)sc[is + 2]) * (float)q2;
			yy[l + 64] = (d * (float)sc[is + 4]) * (float)q3;
			yy[l + 96] = (d * (float)sc[is + 6]) * (float)q4;
		}
	}
}

void lynn_ggml_dequant_ref(uint32_t type, const void *src, int64_t n, float *out)
{
	const uint8_t *p = src;
	int64_t i;
	switch (type) {
	case LYNN_GGML_F32:
		memcpy(out, p, (size_t)n * sizeof(float));
		return;
	case LYNN_GGML_F16:
		for (i = 0; i < n; i++)
			out[i] = h2f(p + 2 * i);
		return;
	case LYNN_GGML_BF16:
		for (i = 0; i < n; i++)
			out[i] = lynn_bf16_to_f32(rd16(p + 2 * i));
		return;
	default:
		break;
	}
	int blck = INFO[type].blck, bytes = INFO[type].bytes;
	for (i = 0; i < n / blck; i++, p += bytes, out += blck) {
		switch (type) {
		case LYNN_GGML_Q4_0: dq_q4_0(p, out); break;
		case LYNN_GGML_Q4_1: dq_q4_1(p, out); break;
		case LYNN_GGML_Q5_0: dq_q5(p, out, false); break;
		case LYNN_GGML_Q5_1: dq_q5(p, out, true); break;
		case LYNN_GGML_Q8_0: dq_q8_0(p, out); break;
		case LYNN_GGML_Q4_K: dq_qk45(p, out, false); break;
		case LYNN_GGML_Q5_K: dq_qk45(p, out, true); break;
		case LYNN_GGML_Q6_K: dq_q6_k(p, out); break;
		default: break;
		}
	}
}

/* ===== AVX2 (same values: the same f32 mul/sub per element, no FMA) ===== */

#if defined(__x86_64__) || defined(__i386__)
#include "cpu/simd.h"
#define HAVE_X86 1
#define AVX2_FN __attribute__((target("avx2,fma")))

/* 8 unsigned bytes at p (low 64 bits of v) -> 8 f32 */
AVX2_FN static inline __m256 u8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* The 4 groups of 8 bytes of a 32-byte vector, low lane first. */
AVX2_FN static inline void parts4(__m256i v, __m128i parts[4])
{
	__m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
	parts[0] = lo;
	parts[1] = _mm_srli_si128(lo, 8);
	parts[2] = hi;
	parts[3] = _mm_srli_si128(hi, 8);
}

/* Q4_K sub-block j (32 weights) of super-block b (whose d and dmin the
 * caller read): its quants as 4 groups of 8 and its d*sc, dmin*m; a group's
 * weights are q4k_w8. */
AVX2_FN static inline void q4k_sub(const uint8_t *b, float d, float dmin, int j, __m128i parts[4],
				   __m256 *dl, __m256 *ml)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * (j / 2)));
	uint8_t a, mm;
	scale_min_k4(j, b + 4, &a, &mm);
	*dl = _mm256_set1_ps(d * (float)a);
	*ml = _mm256_set1_ps(dmin * (float)mm);
	parts4(_mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4), parts);
}

AVX2_FN static inline __m256 q4k_w8(__m128i part, __m256 dl, __m256 ml)
{
	return _mm256_sub_ps(_mm256_mul_ps(dl, u8x8_ps(part)), ml);
}

/* Q6_K half h (128 weights) of super-block b: its 4 vectors of 32 six-bit
 * quants; group p of vector k has the weights q6k_w8 (d: the block's). */
AVX2_FN static inline void q6k_half(const uint8_t *b, int h, __m256i q[4])
{
	const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
	const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
	__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
	__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
	__m256i hb = _mm256_loadu_si256((const __m256i *)qh);
	q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
	q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
			       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
	q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
			       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
	q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
			       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
}

AVX2_FN static inline __m256 q6k_w8(const uint8_t *b, float d, int h, int k, int p, __m128i part)
{
	const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
	__m256 s = _mm256_set1_ps(d * (float)sc[p / 2 + 2 * k]);
	return _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(part),
								    _mm256_set1_epi32(32))));
}

/* Q8_0 block b (scale d): group p of its 32 weights */
AVX2_FN static inline __m256 q8_w8(const uint8_t *b, __m256 d, int p)
{
	__m128i v = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * p));
	return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
}

AVX2_FN static void dq_q4_k_avx2(const uint8_t *b, float *y)
{
	const float d = h2f(b), dmin = h2f(b + 2);
	for (int j = 0; j < 8; j++) {
		__m128i parts[4];
		__m256 dl, ml;
		q4k_sub(b, d, dmin, j, parts, &dl, &ml);
		for (int p = 0; p < 4; p++)
			_mm256_storeu_ps(y + 32 * j + 8 * p, q4k_w8(parts[p], dl, ml));
	}
}

AVX2_FN static void dq_q6_k_avx2(const uint8_t *b, float *y)
{
	const float d = h2f(b + 208);
	for (int h = 0; h < 2; h++) {
		__m256i q[4];
		q6k_half(b, h, q);
		for (int k = 0; k < 4; k++) {
			__m128i parts[4];
			parts4(q[k], parts);
			for (int p = 0; p < 4; p++)
				_mm256_storeu_ps(y + 128 * h + 32 * k + 8 * p, q6k_w8(b, d, h, k, p, parts[p]));
		}
	}
}

AVX2_FN static void dq_q8_0_avx2(const uint8_t *b, float *y)
{
	const __m256 d = _mm256_set1_ps(h2f(b));
	for (int p = 0; p < 4; p++)
		_mm256_storeu_ps(y + 8 * p, q8_w8(b, d, p));
}

AVX2_FN static float dot_avx2(const float *a, const float *b, int64_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
	float r = lynn_hsum256(_mm256_add_ps(s0, s1));
	for (; i < n; i++)
		r += a[i] * b[i];
	return r;
}

/* ===== few tokens: dequantized in registers =====
 * For 1..4 tokens (MM, a constant where inlined) the weights are computed 8
 * at a time with the dq_*_avx2 operations (so bit for bit the same values)
 * and multiplied into the tokens' accumulators straight away, instead of
 * being stored to a chunk buffer and loaded back per token. 4 / 2 / 1
 * accumulators a token for 1 / 2 / 3-4 tokens keep the FMA chains short. */
#define FEW_MAX 4

#define FEW_ACC(MM) ((MM) == 1 ? 4 : (MM) == 2 ? 2 : 1)

/* acc[t][p % A] += wv * x[t][xo..xo+8) for the MM tokens */
#define FEW_FMA(wv, xo, p)                                                                  	do {                                                                                		_Pragma("GCC unroll 4") for (int t_ = 0; t_ < MM; t_++) acc[t_][(p) % A] =        			_mm256_fmadd_ps((wv), _mm256_loadu_ps(x + t_ * ldx + (xo)), acc[t_][(p) % A]); 	} while (0)

AVX2_FN __attribute__((always_inline)) static inline void few_sum(__m256 (*acc)[4], const int MM,
								 float *out)
{
	const int A = FEW_ACC(MM);
	for (int t = 0; t < MM; t++) {
		__m256 v = acc[t][0];
		for (int a = 1; a < A; a++)
			v = _mm256_add_ps(v, acc[t][a]);
		out[t] = lynn_hsum256(v);
	}
}

#define FEW_ZERO(MM)                                                                       \
	do {                                                                               \
		for (int t_ = 0; t_ < (MM); t_++)                                          \
			for (int a_ = 0; a_ < FEW_ACC(MM); a_++)                           \
				acc[t_][a_] = _mm256_setzero_ps();                         \
	} while (0)

AVX2_FN __attribute__((always_inline)) static inline void
few_q4_k(const uint8_t *row, int64_t nsb, const float *x, int64_t ldx, const int MM, float *out)
{
	const int A = FEW_ACC(MM);
	__m256 acc[FEW_MAX][4];
	FEW_ZERO(MM);
	for (int64_t sb = 0; sb < nsb; sb++, row += 144, x += QKK) {
		const float d = h2f(row), dmin = h2f(row + 2);
		_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
		{
			__m128i parts[4];
			__m256 dl, ml;
			q4k_sub(row, d, dmin, j, parts, &dl, &ml);
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
				FEW_FMA(q4k_w8(parts[p], dl, ml), 32 * j + 8 * p, p);
		}
	}
	few_sum(acc, MM, out);
}

AVX2_FN __attribute__((always_inline)) static inline void
few_q6_k(const uint8_t *row, int64_t nsb, const float *x, int64_t ldx, const int MM, float *out)
{
	const int A = FEW_ACC(MM);
	__m256 acc[FEW_MAX][4];
	FEW_ZERO(MM);
	for (int64_t sb = 0; sb < nsb; sb++, row += 210, x += QKK) {
		const float d = h2f(row + 208);
		_Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
		{
			__m256i q[4];
			q6k_half(row, h, q);
			_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
			{
				__m128i parts[4];
				parts4(q[k], parts);
				_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
					FEW_FMA(q6k_w8(row, d, h, k, p, parts[p]), 128 * h + 32 * k + 8 * p, p);
			}
		}
	}
	few_sum(acc, MM, out);
}

AVX2_FN __attribute__((always_inline)) static inline void
few_q8_0(const uint8_t *row, int64_t nb, const float *x, int64_t ldx, const int MM, float *out)
{
	const int A = FEW_ACC(MM);
	__m256 acc[FEW_MAX][4];
	FEW_ZERO(MM);
	for (int64_t b = 0; b < nb; b++, row += 34, x += QK) {
		const __m256 d = _mm256_set1_ps(h2f(row));
		_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
			FEW_FMA(q8_w8(row, d, p), 8 * p, p);
	}
	few_sum(acc, MM, out);
}

/* One row against MM tokens: Q4_K, Q6_K or Q8_0. */
AVX2_FN __attribute__((always_inline)) static inline void
few_row(uint32_t type, const uint8_t *row, int64_t k, const float *x, int64_t ldx, const int MM,
	float *out)
{
	if (type == LYNN_GGML_Q4_K)
		few_q4_k(row, k / QKK, x, ldx, MM, out);
	else if (type == LYNN_GGML_Q6_K)
		few_q6_k(row, k / QKK, x, ldx, MM, out);
	else
		few_q8_0(row, k / QK, x, ldx, MM, out);
}

AVX2_FN static bool rows_few_avx2(const struct lynn_ggml_view *w, const float *x, int64_t ldx,
				  int64_t n_tok, int64_t r0, int64_t r1, float *y, int64_t ldy,
				  bool accumulate)
{
	float out[FEW_MAX];
	if (w->type != LYNN_GGML_Q4_K && w->type != LYNN_GGML_Q6_K && w->type != LYNN_GGML_Q8_0)
		return false;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *row = w->data + (size_t)r * w->row_bytes;
		switch (n_tok) {
		case 1: few_row(w->type, row, w->n_in, x, ldx, 1, out); break;
		case 2: few_row(w->type, row, w->n_in, x, ldx, 2, out); break;
		case 3: few_row(w->type, row, w->n_in, x, ldx, 3, out); break;
		default: few_row(w->type, row, w->n_in, x, ldx, 4, out); break;
		}
		for (int64_t t = 0; t < n_tok; t++)
			y[t * ldy + r] = accumulate ? y[t * ldy + r] + out[t] : out[t];
	}
	return true;
}

static bool simd(void)
{
	static int have = -1;
	if (have < 0)
		have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	return have;
}
#else
static bool simd(void) { return false; }
#endif

void lynn_ggml_dequant(uint32_t type, const void *src, int64_t n, float *out)
{
#ifdef HAVE_X86
	if (simd() && (type == LYNN_GGML_Q4_K || type == LYNN_GGML_Q6_K || type == LYNN_GGML_Q8_0)) {
		const uint8_t *p = src;
		int blck = INFO[type].blck, bytes = INFO[type].bytes;
		for (int64_t i = 0; i < n / blck; i++, p += bytes, out += blck) {
			if (type == LYNN_GGML_Q4_K)
				dq_q4_k_avx2(p, out);
			else if (type == LYNN_GGML_Q6_K)
				dq_q6_k_avx2(p, out);
			else
				dq_q8_0_avx2(p, out);
		}
		return;
	}
#endif
	lynn_ggml_dequant_ref(type, src, n, out);
}

/* ===== products ===== */

#define CHUNK 2048   /* elements dequantized at a time (a multiple of 256) */
#define TOKS 64      /* activation rows per pass over a weight chunk */

static float dot(const float *a, const float *b, int64_t n)
{
	float s[8] = { 0 };
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s[0] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void lynn_ggml_rows(const struct lynn_ggml_view *w, const float *x, int64_t ldx, int64_t n_tok,
		    int64_t r0, int64_t r1, float *y, int64_t ldy, bool accumulate)
{
	float wbuf[CHUNK];
	float sums[TOKS];
	const int64_t k = w->n_in;
	const int blck = INFO[w->type].blck, bytes = INFO[w->type].bytes;
	const bool use_simd = simd();
	(void)use_simd;
#ifdef HAVE_X86
	if (use_simd && n_tok <= FEW_MAX &&
	    rows_few_avx2(w, x, ldx, n_tok, r0, r1, y, ldy, accumulate))
		return;
#endif

	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *row = w->data + (size_t)r * w->row_bytes;
		for (int64_t t0 = 0; t0 < n_tok; t0 += TOKS) {
			int64_t nt = n_tok - t0 < TOKS ? n_tok - t0 : TOKS;
			for (int64_t t = 0; t < nt; t++)
				sums[t] = 0.0f;
			for (int64_t c0 = 0; c0 < k; c0 += CHUNK) {
				int64_t len = k - c0 < CHUNK ? k - c0 : CHUNK;
				lynn_ggml_dequant(w->type, row + (size_t)(c0 / blck) * (size_t)bytes, len, wbuf);
				for (int64_t t = 0; t < nt; t++)
#ifdef HAVE_X86
					sums[t] += use_simd ? dot_avx2(wbuf, x + (t0 + t) * ldx + c0, len)
							    : dot(wbuf, x + (t0 + t) * ldx + c0, len);
#else
					sums[t] += dot(wbuf, x + (t0 + t) * ldx + c0, len);
#endif
			}
			for (int64_t t = 0; t < nt; t++) {
				if (accumulate)
					y[(t0 + t) * ldy + r] += sums[t];
				else
					y[(t0 + t) * ldy + r] = sums[t];
			}
		}
	}
}
