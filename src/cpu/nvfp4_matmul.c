/*
 * nvfp4_matmul.c - CPU NVFP4 x f32 products (include/lynn/cpu_nvfp4.h).
 *
 * X is re-laid once per call so that each 16-block reads its even elements
 * then its odd ones (xp[b*16 + j] = x[b*16 + 2j], xp[b*16 + 8 + j] =
 * x[b*16 + 2j + 1]); then one 8-byte load of packed weights gives the 8 low
 * nibbles (even k) and the 8 high nibbles (odd k) of a block as two vectors,
 * decoded with a table permute. Block sums are scaled by the E4M3 block
 * scale, the row sum by alpha: q*s is exact, so only f32 summation rounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

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

void lynn_cpu_nvfp4_prep_x(const float *x, int64_t m, int64_t k, float *xp)
{
	for (int64_t i = 0; i < m * k; i += 16)
		for (int j = 0; j < 8; j++) {
			xp[i + j] = x[i + 2 * j];
			xp[i + 8 + j] = x[i + 2 * j + 1];
		}
}

/* ===== portable ===== */

static void rows_scalar(const struct lynn_nvfp4_view *w, const float *xp, int64_t m, int64_t r0,
			int64_t r1, float *y)
{
	const int64_t nb = w->k / 16;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *P = w->packed + r * (w->k / 2), *S = w->scales + r * nb;
		for (int64_t i = 0; i < m; i++) {
			const float *xr = xp + i * w->k;
			float acc = 0.0f;
			for (int64_t b = 0; b < nb; b++) {
				float t = 0.0f;
				for (int j = 0; j < 8; j++) {
					uint8_t byte = P[b * 8 + j];
					t += lynn_e2m1_to_f32(byte & 15) * xr[b * 16 + j];
					t += lynn_e2m1_to_f32(byte >> 4) * xr[b * 16 + 8 + j];
				}
				acc += t * e4m3_fast(S[b]);
			}
			y[i * w->n + r] = acc * w->alpha;
		}
	}
}

/* ===== AVX2 + FMA ===== */

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void
rows_avx2(const struct lynn_nvfp4_view *w, const float *xp, int64_t m, int64_t r0, int64_t r1,
	  float *y)
{
	const int64_t nb = w->k / 16, k = w->k;
	const __m256 tbl = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
	const __m256i nib = _mm256_set1_epi32(15), sgn = _mm256_set1_epi32((int)0x80000000u);

	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *P = w->packed + r * (k / 2), *S = w->scales + r * nb;
		for (int64_t i0 = 0; i0 < m; i0 += 4) {
			int mm = m - i0 < 4 ? (int)(m - i0) : 4;
			__m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(),
					  _mm256_setzero_ps(), _mm256_setzero_ps() };
			for (int64_t b = 0; b < nb; b++) {
				long long bytes;
				memcpy(&bytes, P + b * 8, 8);
				__m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
				__m256i lo = _mm256_and_si256(v, nib), hi = _mm256_srli_epi32(v, 4);
				__m256 qlo = _mm256_permutevar8x32_ps(tbl, lo);
				__m256 qhi = _mm256_permutevar8x32_ps(tbl, hi);
				__m256 s = _mm256_set1_ps(e4m3_fast(S[b]));
				qlo = _mm256_xor_ps(qlo, _mm256_castsi256_ps(_mm256_and_si256(
								_mm256_slli_epi32(lo, 28), sgn)));
				qhi = _mm256_xor_ps(qhi, _mm256_castsi256_ps(_mm256_and_si256(
								_mm256_slli_epi32(hi, 28), sgn)));
				for (int j = 0; j < mm; j++) {
					const float *xr = xp + (i0 + j) * k + b * 16;
					__m256 t = _mm256_mul_ps(qhi, _mm256_loadu_ps(xr + 8));
					t = _mm256_fmadd_ps(qlo, _mm256_loadu_ps(xr), t);
					acc[j] = _mm256_fmadd_ps(t, s, acc[j]);
				}
			}
			for (int j = 0; j < mm; j++)
				y[(i0 + j) * w->n + r] = hsum256(acc[j]) * w->alpha;
		}
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

void lynn_cpu_nvfp4_rows(const struct lynn_nvfp4_view *w, const float *xp, int64_t m,
			 int64_t r0, int64_t r1, float *y)
{
#ifdef HAVE_X86
	if (lynn_cpu_nvfp4_simd()) {
		rows_avx2(w, xp, m, r0, r1, y);
		return;
	}
#endif
	rows_scalar(w, xp, m, r0, r1, y);
}

void lynn_cpu_nvfp4_matmul_ref(const struct lynn_nvfp4_view *w, const float *x, int64_t m,
			       float *y)
{
	float *xp = malloc(sizeof *xp * (size_t)(m * w->k));
	if (!xp)
		return;
	lynn_cpu_nvfp4_prep_x(x, m, w->k, xp);
	rows_scalar(w, xp, m, 0, w->n, y);
	free(xp);
}

struct job {
	const struct lynn_nvfp4_view *w;
	const float *xp;
	int64_t m, chunk;
	float *y;
};

static void run_chunk(void *ud, int64_t i, int tid)
{
	const struct job *j = ud;
	int64_t r0 = i * j->chunk, r1 = r0 + j->chunk;
	(void)tid;
	if (r1 > j->w->n)
		r1 = j->w->n;
	lynn_cpu_nvfp4_rows(j->w, j->xp, j->m, r0, r1, j->y);
}

int lynn_cpu_nvfp4_matmul(const struct lynn_nvfp4_view *w, const float *x, int64_t m, float *y,
			  struct lynn_pool *pool, struct lynn_err *err)
{
	struct job j;
	float *xp;

	if (w->k % 16 || w->n < 1 || m < 1)
		return lynn_errf(err, -LYNN_EINVAL, "nvfp4: matmul: bad shape n %lld k %lld m %lld",
				 (long long)w->n, (long long)w->k, (long long)m);
	xp = malloc(sizeof *xp * (size_t)(m * w->k));
	if (!xp)
		return lynn_errf(err, -LYNN_ENOMEM, "nvfp4: out of memory");
	lynn_cpu_nvfp4_prep_x(x, m, w->k, xp);
	j.w = w;
	j.xp = xp;
	j.m = m;
	j.y = y;
	j.chunk = 64;
	lynn_pool_run(pool, (w->n + j.chunk - 1) / j.chunk, run_chunk, &j);
	free(xp);
	return 0;
}
