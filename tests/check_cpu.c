/* check_cpu.c - src/cpu: the AVX2/FMA matmul against its portable twin and
 * against a double-precision reference, for BF16, F16 and F32 weights, the
 * decode (1-4 tokens) and prefill (many tokens) shapes, odd sizes (tails),
 * strided x/y, accumulate, and one call carrying several products; the
 * delta-rule step and attention against a double reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/cpu.h"
#include "lynn/pool.h"
#include "lynn/st.h"
#include "testutil.h"

/* f32 sums of up to ~600 products of O(1) values in different orders:
 * relative error well under 1e-5 of the sum of |terms|. */
#define TOL_MATMUL_REL 2e-5

static uint64_t rng = 0x1234567;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* Random weights as dtype; also their exact f32 values. */
static void *make_w(enum lynn_dtype dt, int64_t n, float *ref)
{
	void *w = malloc((size_t)n * lynn_dtype_size(dt));
	for (int64_t i = 0; i < n; i++) {
		float f = frand();
		if (dt == LYNN_DTYPE_BF16) {
			uint16_t h = lynn_f32_to_bf16(f);
			((uint16_t *)w)[i] = h;
			ref[i] = lynn_bf16_to_f32(h);
		} else if (dt == LYNN_DTYPE_F16) {
			uint16_t h = lynn_f32_to_f16(f);
			((uint16_t *)w)[i] = h;
			ref[i] = lynn_f16_to_f32(h);
		} else {
			((float *)w)[i] = f;
			ref[i] = f;
		}
	}
	return w;
}

static void check_case(struct lynn_pool *pool, enum lynn_dtype dt, int64_t n_out, int64_t n_in,
		       int64_t n_tok, bool accumulate)
{
	float *wref = malloc((size_t)(n_out * n_in) * sizeof(float));
	void *w = make_w(dt, n_out * n_in, wref);
	int64_t ldx = n_in + 3, ldy = n_out + 5;
	float *x = malloc((size_t)(n_tok * ldx) * sizeof(float));
	float *y0 = malloc((size_t)(n_tok * ldy) * sizeof(float));
	for (int64_t i = 0; i < n_tok * ldx; i++)
		x[i] = frand();
	for (int64_t i = 0; i < n_tok * ldy; i++)
		y0[i] = frand();
	enum lynn_cpu_isa isas[2] = { LYNN_CPU_PORTABLE, LYNN_CPU_AVX2 };
	float *ys[2];
	for (int k = 0; k < 2; k++) {
		ys[k] = malloc((size_t)(n_tok * ldy) * sizeof(float));
		memcpy(ys[k], y0, (size_t)(n_tok * ldy) * sizeof(float));
		struct lynn_mm mm = { .wdt = dt, .w = w, .n_out = n_out, .n_in = n_in, .x = x,
				      .ldx = ldx, .y = ys[k], .ldy = ldy, .n_tok = n_tok,
				      .accumulate = accumulate };
		if (k == 1 && !lynn_cpu_has(LYNN_CPU_AVX2))
			isas[1] = LYNN_CPU_PORTABLE;
		lynn_cpu_matmul(pool, &mm, isas[k]);
	}
	for (int64_t t = 0; t < n_tok; t++)
		for (int64_t o = 0; o < ldy; o++) {
			if (o >= n_out) { /* padding untouched */
				ck_assert_float_eq(ys[0][t * ldy + o], y0[t * ldy + o]);
				ck_assert_float_eq(ys[1][t * ldy + o], y0[t * ldy + o]);
				continue;
			}
			double s = accumulate ? y0[t * ldy + o] : 0.0, mag = fabs(s);
			for (int64_t i = 0; i < n_in; i++) {
				s += (double)wref[o * n_in + i] * x[t * ldx + i];
				mag += fabs((double)wref[o * n_in + i] * x[t * ldx + i]);
			}
			double tol = TOL_MATMUL_REL * mag + 1e-30;
			ck_assert_msg(fabs(ys[0][t * ldy + o] - s) <= tol, "portable %s %lldx%lld tok %lld: %g vs %g",
				      lynn_dtype_name(dt), (long long)n_out, (long long)n_in, (long long)n_tok,
				      ys[0][t * ldy + o], s);
			ck_assert_msg(fabs(ys[1][t * ldy + o] - s) <= tol, "avx2 %s %lldx%lld tok %lld: %g vs %g",
				      lynn_dtype_name(dt), (long long)n_out, (long long)n_in, (long long)n_tok,
				      ys[1][t * ldy + o], s);
			ck_assert_msg(fabs(ys[1][t * ldy + o] - ys[0][t * ldy + o]) <= 2 * tol,
				      "avx2 vs portable");
		}
	free(ys[0]); free(ys[1]); free(x); free(y0); free(w); free(wref);
}

START_TEST(test_matmul_twins)
{
	struct lynn_pool *pool = lynn_pool_create(2, NULL);
	enum lynn_dtype dts[3] = { LYNN_DTYPE_BF16, LYNN_DTYPE_F16, LYNN_DTYPE_F32 };
	int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 4, 8 }, { 37, 67 }, { 64, 256 }, { 130, 600 } };
	int64_t toks[] = { 1, 2, 3, 4, 5, 17 };
	for (int d = 0; d < 3; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (size_t t = 0; t < sizeof toks / sizeof toks[0]; t++)
				check_case(_i ? pool : NULL, dts[d], shapes[s][0], shapes[s][1], toks[t], (t & 1) != 0);
	lynn_pool_free(pool);
}
END_TEST

START_TEST(test_matmul_many)
{
	struct lynn_pool *pool = lynn_pool_create(2, NULL);
	float wr[3][40 * 24];
	void *w[3];
	float x[5 * 24], y[3][5 * 40], yref[3][5 * 40];
	for (int i = 0; i < 5 * 24; i++)
		x[i] = frand();
	struct lynn_mm mm[3];
	for (int j = 0; j < 3; j++) {
		w[j] = make_w(j == 1 ? LYNN_DTYPE_F32 : LYNN_DTYPE_BF16, 40 * 24, wr[j]);
		mm[j] = (struct lynn_mm){ .wdt = j == 1 ? LYNN_DTYPE_F32 : LYNN_DTYPE_BF16, .w = w[j],
					  .n_out = 40, .n_in = 24, .x = x, .ldx = 24, .y = y[j], .ldy = 40,
					  .n_tok = j == 2 ? 0 : 5 };
		for (int t = 0; t < 5; t++)
			for (int o = 0; o < 40; o++) {
				double s = 0;
				for (int i = 0; i < 24; i++)
					s += (double)wr[j][o * 24 + i] * x[t * 24 + i];
				yref[j][t * 40 + o] = (float)s;
			}
	}
	memset(y, 0, sizeof y);
	lynn_cpu_matmul_many(pool, mm, 3, LYNN_CPU_AUTO);
	for (int j = 0; j < 2; j++)
		for (int i = 0; i < 5 * 40; i++)
			ck_assert_float_eq_tol(y[j][i], yref[j][i], 1e-5);
	for (int i = 0; i < 5 * 40; i++) /* n_tok 0: untouched */
		ck_assert_float_eq(y[2][i], 0.0f);
	for (int j = 0; j < 3; j++)
		free(w[j]);
	lynn_pool_free(pool);
}
END_TEST

START_TEST(test_row_to_f32_and_isa)
{
	uint16_t h[3] = { lynn_f32_to_bf16(1.5f), lynn_f32_to_bf16(-2.0f), 0x7f80 };
	float out[3];
	lynn_cpu_row_to_f32(LYNN_DTYPE_BF16, h, 0, 3, out);
	ck_assert_float_eq(out[0], 1.5f);
	ck_assert_float_eq(out[1], -2.0f);
	ck_assert(isinf(out[2]));
	/* every half value widens like the reference converter */
	for (uint32_t v = 0; v < 65536; v++) {
		uint16_t hv = (uint16_t)v;
		float a;
		lynn_cpu_row_to_f32(LYNN_DTYPE_F16, &hv, 0, 1, &a);
		float b = lynn_f16_to_f32(hv);
		ck_assert(memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)));
	}
	ck_assert(lynn_cpu_has(LYNN_CPU_PORTABLE));
	ck_assert(lynn_cpu_best() != LYNN_CPU_AUTO);
	ck_assert_str_eq(lynn_cpu_isa_name(LYNN_CPU_AVX2), "avx2");
	ck_assert(lynn_cpu_wdtype_ok(LYNN_DTYPE_F16) && !lynn_cpu_wdtype_ok(LYNN_DTYPE_I32));
}
END_TEST

/* The delta-rule step: AVX2 and portable against a double reference. */
START_TEST(test_delta_step)
{
	int dk = 16, dv = 24;
	float S0[16 * 24], k[16], q[16], v[24];
	for (int i = 0; i < dk * dv; i++)
		S0[i] = frand();
	for (int i = 0; i < dk; i++) {
		k[i] = frand() * 0.25f;
		q[i] = frand() * 0.25f;
	}
	for (int j = 0; j < dv; j++)
		v[j] = frand();
	float beta = 0.7f, decay = 0.9f;
	double S[16 * 24], m[24] = { 0 }, o[24] = { 0 };
	for (int i = 0; i < dk * dv; i++)
		S[i] = S0[i] * (double)decay;
	for (int a = 0; a < dk; a++)
		for (int j = 0; j < dv; j++)
			m[j] += S[a * dv + j] * k[a];
	for (int a = 0; a < dk; a++)
		for (int j = 0; j < dv; j++) {
			S[a * dv + j] += k[a] * (v[j] - m[j]) * beta;
			o[j] += S[a * dv + j] * q[a];
		}
	enum lynn_cpu_isa isas[2] = { LYNN_CPU_PORTABLE, LYNN_CPU_AVX2 };
	for (int t = 0; t < 2; t++) {
		float Sx[16 * 24], ox[24];
		memcpy(Sx, S0, sizeof Sx);
		lynn_cpu_delta_step(Sx, dk, dv, k, q, v, beta, decay, ox, isas[t]);
		for (int i = 0; i < dk * dv; i++)
			ck_assert_float_eq_tol(Sx[i], S[i], 1e-5);
		for (int j = 0; j < dv; j++)
			ck_assert_float_eq_tol(ox[j], o[j], 1e-5);
	}
}
END_TEST

/* Attention of G heads sharing a KV head: AVX2 and portable against a
 * double reference, over head sizes with and without an 8-float tail,
 * 1 to 300 positions, strided q, KV rows and outputs (NaN-poisoned
 * around them: nothing outside is written). */
START_TEST(test_attend)
{
	static const struct { int G, hd; int64_t T; } cases[] = {
		{ 1, 16, 1 }, { 4, 16, 37 }, { 8, 128, 300 }, { 2, 24, 64 }, { 3, 12, 9 },
	};
	enum lynn_cpu_isa isas[2] = { LYNN_CPU_PORTABLE, LYNN_CPU_AVX2 };
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		const int G = cases[c].G, hd = cases[c].hd;
		const int64_t T = cases[c].T, ldq = 2 * hd + 3, ldkv = 3 * hd + 5, ldo = hd + 7;
		float *q = malloc((size_t)(G * ldq) * sizeof *q), *k = malloc((size_t)(T * ldkv) * sizeof *k);
		float *v = malloc((size_t)(T * ldkv) * sizeof *v), *o = malloc((size_t)(G * ldo) * sizeof *o);
		float *sc = malloc((size_t)(G * T) * sizeof *sc);
		double *ref = malloc((size_t)(G * hd) * sizeof *ref), *p = malloc((size_t)T * sizeof *p);
		for (int64_t i = 0; i < G * ldq; i++)
			q[i] = frand();
		for (int64_t i = 0; i < T * ldkv; i++) {
			k[i] = frand();
			v[i] = frand();
		}
		const float scale = 1.0f / sqrtf((float)hd);
		for (int h = 0; h < G; h++) {
			double mx = -INFINITY, sum = 0;
			for (int64_t t = 0; t < T; t++) {
				double d = 0;
				for (int j = 0; j < hd; j++)
					d += (double)q[h * ldq + j] * k[t * ldkv + j];
				p[t] = d * scale;
				mx = p[t] > mx ? p[t] : mx;
			}
			for (int64_t t = 0; t < T; t++)
				sum += (p[t] = exp(p[t] - mx));
			for (int j = 0; j < hd; j++) {
				double a = 0;
				for (int64_t t = 0; t < T; t++)
					a += p[t] / sum * v[t * ldkv + j];
				ref[h * hd + j] = a;
			}
		}
		for (int i = 0; i < 2; i++) {
			for (int64_t x = 0; x < G * ldo; x++)
				o[x] = NAN;
			lynn_cpu_attend(q, ldq, G, k, v, ldkv, T, hd, scale, sc, o, ldo, isas[i]);
			for (int h = 0; h < G; h++)
				for (int j = 0; j < ldo; j++) {
					if (j >= hd) {
						ck_assert_msg(isnan(o[h * ldo + j]), "case %zu: wrote past the head", c);
						continue;
					}
					ck_assert_msg(fabs(o[h * ldo + j] - ref[h * hd + j]) <= 1e-5,
						      "case %zu isa %d head %d [%d]: %g vs %g", c, i, h, j, o[h * ldo + j],
						      ref[h * hd + j]);
				}
		}
		free(q);
		free(k);
		free(v);
		free(o);
		free(sc);
		free(ref);
		free(p);
	}
}
END_TEST

Suite *cpu_suite(void)
{
	Suite *s = suite_create("cpu");
	TCase *tc = tcase_create("matmul");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_matmul_twins, 0, 2);
	tcase_add_test(tc, test_matmul_many);
	tcase_add_test(tc, test_row_to_f32_and_isa);
	tcase_add_test(tc, test_delta_step);
	tcase_add_test(tc, test_attend);
	suite_add_tcase(s, tc);
	return s;
}
