/* check_nvfp4.c - src/formats/nvfp4.c, src/formats/quantize.c,
 * src/cpu/nvfp4_matmul.c, lynn quantize, the runner on NVFP4 checkpoints and
 * (tag "cuda") the CUDA kernels.
 *
 * Oracles: the format definitions (weight-formats.md §2, values written out
 * by hand below), torch's float8_e4m3fn dequantization
 * (tests/fixtures/nvfp4_ref.safetensors, gen_fixtures.py), f64 references
 * computed here from the definitions, and Hugging Face's logits for the tiny
 * model (ref_logits.safetensors). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lynn/cpu_nvfp4.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/lora.h"
#include "lynn/model.h"
#include "lynn/nvfp4.h"
#include "lynn/quantize.h"
#include "lynn/st.h"
#include "testutil.h"

#ifdef LYNN_CUDA
#include <cuda_runtime_api.h>
#include "../kernels/lynn_cuda.h"
#endif

/* RTN NVFP4 on Gaussian weights: E2M1 has 3 magnitude bits, so the relative
 * RMS error per weight is about 0.09-0.10 (the tiny model's weights measure
 * 0.095); 0.11 leaves room for the block-scale rounding of small samples. */
#define LYNN_TOL_NVFP4_RMSE 0.11
/* CPU kernels vs the f64 reference: exact products, f32 sums over K <= 4096. */
#define TOL_KERNEL_REL 1e-5
/* Runner on an NVFP4 checkpoint vs the same runner on its f32 dequantization:
 * the same products, summed in another order (the runner's own f32 paths
 * agree with HF to 1e-3 max abs, check_model.c). */
#define TOL_NV_VS_DEQUANT_MAXABS 1e-3
/* NVFP4 vs HF's bf16-valued f32 logits on the tiny random model (hidden 64,
 * 4 layers): 4-bit RTN (9.5% weight error per linear) measures a mean cosine
 * of 0.92 over the 49 chat positions (single positions of this random model
 * drop to 0.63, so only the mean is bounded); the bound says "the logits
 * still carry the model", not "lossless". The exact check of the NVFP4 path
 * is TOL_NV_VS_DEQUANT_MAXABS. */
#define TOL_TINY_COS_MEAN 0.85
/* CUDA runner vs CPU runner on an NVFP4 checkpoint: the mean over positions
 * of the logits' cosine (W4A16 against f32 activations). Most positions
 * agree to 0.99997; the tiny random model's router flips an expert at a
 * near-tie now and then under the bf16 rounding, which moves one position
 * to 0.991 (measured; docs/benchmarks.md "CUDA runner"). */
#define TOL_CUDA_NV_COS_MEAN 0.999
/* The shared expert run as one more expert of the expert MLP call against
 * its own three products on the GPU: the same products summed in another
 * order (the call splits K over 4 warps where a lone 512-row product splits
 * it over 8), so a bf16 rounding of its activation can differ by one unit
 * (2^-8 relative), which the 4 random layers carry to the logits; measured
 * cosine min 0.9999924 and max|d| 0.012 at max|logit| 3.1 (h200 run 31,
 * docs/benchmarks.md "CUDA runner"). A slot wired to the wrong expert, row
 * or weight moves the logits by the size of the shared expert's output. */
#define TOL_SHARED_BANK_COS_MIN 0.99999
#define TOL_SHARED_BANK_MAXABS_REL 0.01

/* ===== elements and scales, by hand ===== */

START_TEST(test_e2m1_every_code)
{
	static const float want[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
					-0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
	for (int c = 0; c < 16; c++) {
		float v = lynn_e2m1_to_f32((uint8_t)c);
		ck_assert_msg(v == want[c] && signbit(v) == signbit(want[c]), "code %d -> %g", c, v);
		ck_assert_int_eq(lynn_f32_to_e2m1(want[c]), c);
		ck_assert_int_eq(lynn_e2m1_to_f32((uint8_t)(c | 0xF0)) == want[c], 1); /* high bits ignored */
	}
}
END_TEST

START_TEST(test_e2m1_rounding)
{
	/* ties as listed in weight-formats.md §2.1 (RNE on the grid) */
	static const struct { float x; uint8_t code; } t[] = {
		{ 0.25f, 0 }, { 0.2501f, 1 }, { 0.75f, 2 }, { 0.7499f, 1 }, { 1.25f, 2 },
		{ 1.2501f, 3 }, { 1.75f, 4 }, { 2.5f, 4 }, { 2.5001f, 5 }, { 3.5f, 6 },
		{ 3.4999f, 5 }, { 5.0f, 6 }, { 5.0001f, 7 }, { 6.0f, 7 }, { 1e9f, 7 },
		{ -0.25f, 8 }, { -0.75f, 10 }, { -5.0f, 14 }, { -7.0f, 15 }, { 0.1f, 0 },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		ck_assert_msg(lynn_f32_to_e2m1(t[i].x) == t[i].code, "%g -> %d, want %d",
			      (double)t[i].x, lynn_f32_to_e2m1(t[i].x), t[i].code);
	ck_assert_int_eq(lynn_f32_to_e2m1(NAN), 0);
}
END_TEST

START_TEST(test_e4m3)
{
	/* values by the definition: bias 7, 3 mantissa bits, subnormals m/8*2^-6 */
	ck_assert(lynn_e4m3_to_f32(0x38) == 1.0f);
	ck_assert(lynn_e4m3_to_f32(0x7e) == 448.0f);
	ck_assert(lynn_e4m3_to_f32(0x01) == ldexpf(1, -9));
	ck_assert(lynn_e4m3_to_f32(0x07) == 7 * ldexpf(1, -9));
	ck_assert(lynn_e4m3_to_f32(0x08) == ldexpf(1, -6));
	ck_assert(isnan(lynn_e4m3_to_f32(0x7f)) && isnan(lynn_e4m3_to_f32(0xff)));
	ck_assert(lynn_e4m3_to_f32(0xb8) == -1.0f);
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f)
			continue;
		ck_assert_msg(lynn_f32_to_e4m3(lynn_e4m3_to_f32((uint8_t)c)) == c, "code 0x%02x", c);
	}
	/* ties to even, saturation, NaN */
	ck_assert_int_eq(lynn_f32_to_e4m3(1.0625f), 0x38);  /* between 1 and 1.125 */
	ck_assert_int_eq(lynn_f32_to_e4m3(1.1875f), 0x3a);  /* between 1.125 and 1.25 */
	ck_assert_int_eq(lynn_f32_to_e4m3(ldexpf(1, -10)), 0x00); /* half the smallest */
	ck_assert_int_eq(lynn_f32_to_e4m3(3 * ldexpf(1, -10)), 0x02);
	ck_assert_int_eq(lynn_f32_to_e4m3(464.0f), 0x7e);
	ck_assert_int_eq(lynn_f32_to_e4m3(1e30f), 0x7e);
	ck_assert_int_eq(lynn_f32_to_e4m3(-1e30f), 0xfe);
	ck_assert_int_eq(lynn_f32_to_e4m3(NAN), 0x7f);
}
END_TEST

/* A hand-built row of K = 32: byte i = code i (low nibble, even k) | code
 * 15-i (high nibble, odd k); block scales 1.0 and 4.0, then the extremes. */
START_TEST(test_dequant_hand)
{
	uint8_t packed[16], scales[2] = { 0x38, 0x48 };
	float out[32];
	for (int i = 0; i < 16; i++)
		packed[i] = (uint8_t)((i & 15) | ((15 - i) << 4));
	lynn_nvfp4_dequant_row(LYNN_NVFP4_CT, packed, scales, 2.0f, 32, out); /* q*s/2 */
	ck_assert(out[0] == 0.0f && out[1] == -3.0f && out[2] == 0.25f && out[3] == -2.0f);
	ck_assert(out[16] == 0.0f && signbit(out[16]) && out[17] == 12.0f);
	ck_assert(out[30] == -12.0f && out[31] == 0.0f);
	lynn_nvfp4_dequant_row(LYNN_NVFP4_MODELOPT, packed, scales, 0.125f, 32, out); /* q*s/8 */
	ck_assert(out[1] == -0.75f && out[3] == -0.5f && out[17] == 3.0f && out[30] == -3.0f);
	scales[0] = 0x01; /* 2^-9, the smallest subnormal */
	scales[1] = 0x7e; /* 448 */
	lynn_nvfp4_dequant_row(LYNN_NVFP4_MODELOPT, packed, scales, 1.0f, 32, out);
	ck_assert(out[1] == -6.0f * ldexpf(1, -9) && out[2] == ldexpf(1, -10));
	ck_assert(out[17] == 2688.0f && out[30] == -2688.0f);
}
END_TEST

/* torch's dequantization (float8_e4m3fn) of random tensors, both conventions */
START_TEST(test_dequant_matches_torch)
{
	struct lynn_err err = { 0 };
	struct lynn_st_file *f = lynn_st_open(FIXTURES "/nvfp4_ref.safetensors", &err);
	ck_assert_msg(f != NULL, "%s", err.msg);
	const struct lynn_tensor *p = lynn_st_find(f, "weight_packed"), *s = lynn_st_find(f, "weight_scale");
	const struct lynn_tensor *g = lynn_st_find(f, "weight_global_scale"), *g2 = lynn_st_find(f, "weight_scale_2");
	const struct lynn_tensor *rc = lynn_st_find(f, "dequant_ct"), *rm = lynn_st_find(f, "dequant_modelopt");
	ck_assert(p && s && g && g2 && rc && rm);
	int64_t N = p->shape[0], K = p->shape[1] * 2;
	float gs, gs2, *row = malloc(sizeof(float) * (size_t)K);
	memcpy(&gs, g->data, 4);
	memcpy(&gs2, g2->data, 4);
	for (int64_t r = 0; r < N; r++) {
		lynn_nvfp4_dequant_row(LYNN_NVFP4_CT, (const uint8_t *)p->data + r * K / 2,
				       (const uint8_t *)s->data + r * K / 16, gs, K, row);
		ck_assert_msg(!memcmp(row, (const float *)rc->data + r * K, sizeof(float) * (size_t)K),
			      "ct row %lld differs from torch", (long long)r);
		lynn_nvfp4_dequant_row(LYNN_NVFP4_MODELOPT, (const uint8_t *)p->data + r * K / 2,
				       (const uint8_t *)s->data + r * K / 16, gs2, K, row);
		ck_assert_msg(!memcmp(row, (const float *)rm->data + r * K, sizeof(float) * (size_t)K),
			      "modelopt row %lld differs from torch", (long long)r);
	}
	free(row);
	lynn_st_close(f);
}
END_TEST

/* ===== quantize ===== */

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * 0x1p-53;
}
static float gauss(void)
{
	double u = urand() + 1e-12, v = urand();
	return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

START_TEST(test_quantize_bounds)
{
	const int64_t K = 4096;
	float *x = malloc(sizeof(float) * K), *d = malloc(sizeof(float) * K);
	uint8_t packed[2048], scales[256], p2[2048], s2[256];
	for (int fmt = 1; fmt <= 2; fmt++) {
		double se = 0, ss = 0;
		for (int rep = 0; rep < 8; rep++) {
			float amax = 0;
			for (int64_t i = 0; i < K; i++) {
				x[i] = gauss() * 0.02f;
				amax = fmaxf(amax, fabsf(x[i]));
			}
			x[7] = 0; /* an exact zero stays zero */
			float g = lynn_nvfp4_global_scale((enum lynn_nvfp4_format)fmt, amax);
			lynn_nvfp4_quantize_row((enum lynn_nvfp4_format)fmt, x, K, g, packed, scales);
			lynn_nvfp4_dequant_row((enum lynn_nvfp4_format)fmt, packed, scales, g, K, d);
			ck_assert(d[7] == 0.0f);
			for (int64_t b = 0; b < K / 16; b++) {
				float s = lynn_e4m3_to_f32(scales[b]);
				float eff = fmt == LYNN_NVFP4_CT ? s / g : s * g, bmax = 0;
				ck_assert_msg((scales[b] & 0x7f) != 0x7f && s > 0, "block scale 0x%02x", scales[b]);
				for (int j = 0; j < 16; j++)
					bmax = fmaxf(bmax, fabsf(x[b * 16 + j]));
				/* recipe: block scale = e4m3(amax_blk / 6 / tensor multiplier) */
				float want = fmt == LYNN_NVFP4_CT ? g * bmax / 6 : bmax / (6 * g);
				ck_assert_int_eq(scales[b], lynn_f32_to_e4m3(fminf(want, 448)));
				for (int j = 0; j < 16; j++) {
					float e = fabsf(d[b * 16 + j] - x[b * 16 + j]);
					/* half the widest grid gap (4..6), or the clamp at 6 */
					float bound = fmaxf(eff, bmax - 6 * eff) * 1.0001f + 1e-12f;
					ck_assert_msg(e <= bound, "fmt %d k %lld err %g > %g", fmt,
						      (long long)(b * 16 + j), (double)e, (double)bound);
				}
			}
			for (int64_t i = 0; i < K; i++) {
				se += (double)(d[i] - x[i]) * (d[i] - x[i]);
				ss += (double)x[i] * x[i];
			}
			/* idempotent: the dequantized row quantizes to the same codes */
			lynn_nvfp4_quantize_row((enum lynn_nvfp4_format)fmt, d, K, g, p2, s2);
			ck_assert(!memcmp(p2, packed, K / 2) && !memcmp(s2, scales, K / 16));
		}
		ck_assert_msg(sqrt(se / ss) <= LYNN_TOL_NVFP4_RMSE, "fmt %d rel rmse %g", fmt,
			      sqrt(se / ss));
	}
	/* all-zero block: CT eps scale, ModelOpt 1.0, zeros back */
	memset(x, 0, sizeof(float) * 16);
	lynn_nvfp4_quantize_row(LYNN_NVFP4_CT, x, 16, 2688.0f, packed, scales);
	ck_assert_int_eq(scales[0], lynn_f32_to_e4m3(0.125f));
	lynn_nvfp4_quantize_row(LYNN_NVFP4_MODELOPT, x, 16, 1.0f, packed, scales);
	ck_assert_int_eq(scales[0], 0x38);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(packed[i], 0);
	/* conventions are reciprocal */
	ck_assert(fabsf(lynn_nvfp4_global_scale(LYNN_NVFP4_CT, 2.0f) - 1344.0f) < 1e-3f);
	ck_assert(fabsf(lynn_nvfp4_global_scale(LYNN_NVFP4_MODELOPT, 2.0f) - 2.0f / 2688) < 1e-9f);
	ck_assert(lynn_nvfp4_global_scale(LYNN_NVFP4_CT, 0.0f) == 1.0f);
	ck_assert(lynn_nvfp4_global_scale(LYNN_NVFP4_CT, INFINITY) == 1.0f);
	free(x);
	free(d);
}
END_TEST

/* ===== the checkpoint rules ===== */

static struct lynn_tensor mk(const char *name, enum lynn_dtype dt, int nd, int64_t a, int64_t b,
			     const void *data, uint64_t nbytes)
{
	struct lynn_tensor t;
	memset(&t, 0, sizeof t);
	t.name = name;
	t.dtype = dt;
	t.n_dims = nd;
	t.shape[0] = a;
	t.shape[1] = b;
	t.n_elems = nd == 0 ? 1 : nd == 1 ? a : a * b;
	t.data = data;
	t.nbytes = nbytes;
	return t;
}

START_TEST(test_scan_rules)
{
	static uint8_t packed[4 * 16], sc[4 * 2], badsc[4 * 2];
	float one = 1.0f, zero = 0.0f, inf = INFINITY;
	struct lynn_nvfp4_scan s;
	struct lynn_err err = { 0 };
	memset(sc, 0x38, sizeof sc);
	memset(badsc, 0x38, sizeof badsc);
	badsc[5] = 0x7f;
	/* a complete CT linear + an unquantized tensor */
	struct lynn_tensor t[6] = {
		mk("m.l.q_proj.weight_packed", LYNN_DTYPE_U8, 2, 4, 16, packed, sizeof packed),
		mk("m.l.q_proj.weight_scale", LYNN_DTYPE_F8_E4M3, 2, 4, 2, sc, sizeof sc),
		mk("m.l.q_proj.weight_global_scale", LYNN_DTYPE_F32, 1, 1, 0, &one, 4),
		mk("m.norm.weight", LYNN_DTYPE_BF16, 1, 2, 0, sc, 4),
	};
	const struct lynn_tensor *ts[6] = { &t[0], &t[1], &t[2], &t[3] };
	ck_assert_int_eq(lynn_nvfp4_scan(ts, 4, true, &s, &err), 0);
	ck_assert_int_eq(s.format, LYNN_NVFP4_CT);
	ck_assert_int_eq(s.n_linears, 1);
	ck_assert_int_eq(s.n_problems, 0);
	ck_assert_int_eq(s.linears[0].k, 32);
	ck_assert(!s.w4a4);
	ck_assert_int_eq(s.n_quant_tensors, 3);
	ck_assert_int_eq(s.n_other_tensors, 1);
	lynn_nvfp4_scan_free(&s);

	/* broken variants: each must be reported, naming the tensor */
	struct {
		int idx;
		struct lynn_tensor repl;
		const char *needle;
	} bad[] = {
		{ 1, mk("m.l.q_proj.weight_scale", LYNN_DTYPE_F8_E4M3, 2, 4, 2, badsc, 8), "NaN" },
		{ 1, mk("m.l.q_proj.weight_scale", LYNN_DTYPE_BF16, 2, 4, 2, sc, 8), "expected F8_E4M3" },
		{ 1, mk("m.l.q_proj.weight_scale", LYNN_DTYPE_F8_E4M3, 2, 4, 1, sc, 4), "shape" },
		{ 2, mk("m.l.q_proj.weight_global_scale", LYNN_DTYPE_F32, 1, 1, 0, &zero, 4), "> 0" },
		{ 2, mk("m.l.q_proj.weight_global_scale", LYNN_DTYPE_F32, 1, 1, 0, &inf, 4), "finite" },
		{ 2, mk("m.l.other.weight_global_scale", LYNN_DTYPE_F32, 1, 1, 0, &one, 4), "missing tensor scale" },
		{ 0, mk("m.l.q_proj.weight_packed", LYNN_DTYPE_U8, 2, 4, 12, packed, 48), "multiple of 16" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct lynn_tensor u[4] = { t[0], t[1], t[2], t[3] };
		const struct lynn_tensor *us[4] = { &u[0], &u[1], &u[2], &u[3] };
		u[bad[i].idx] = bad[i].repl;
		ck_assert_int_eq(lynn_nvfp4_scan(us, 4, true, &s, &err), 0);
		ck_assert_msg(s.n_problems >= 1 && strstr(s.problems[0], bad[i].needle),
			      "case %zu: %lld problems, first '%s'", i, (long long)s.n_problems,
			      s.n_problems ? s.problems[0] : "");
		lynn_nvfp4_scan_free(&s);
	}
	/* missing block scale */
	{
		const struct lynn_tensor *us[3] = { &t[0], &t[2], &t[3] };
		ck_assert_int_eq(lynn_nvfp4_scan(us, 3, false, &s, &err), 0);
		ck_assert(s.n_problems >= 1 && strstr(s.problems[0], "missing block scale"));
		lynn_nvfp4_scan_free(&s);
	}
	/* activation scales on some linears only; ModelOpt mixed in -> error */
	{
		t[4] = mk("m.l.q_proj.input_global_scale", LYNN_DTYPE_F32, 1, 1, 0, &one, 4);
		t[5] = mk("m.l.k_proj.weight_scale_2", LYNN_DTYPE_F32, 0, 0, 0, &one, 4);
		const struct lynn_tensor *us[6] = { &t[0], &t[1], &t[2], &t[3], &t[4], &t[5] };
		ck_assert_int_eq(lynn_nvfp4_scan(us, 5, true, &s, &err), 0);
		ck_assert(s.w4a4 && s.n_problems == 0);
		lynn_nvfp4_scan_free(&s);
		ck_assert_int_eq(lynn_nvfp4_scan(us, 6, true, &s, &err), -LYNN_EFORMAT);
		ck_assert(strstr(err.msg, "mixes"));
	}
	ck_assert_int_eq(lynn_nvfp4_format_from_config("compressed-tensors", "nvfp4-pack-quantized", NULL),
			 LYNN_NVFP4_CT);
	ck_assert_int_eq(lynn_nvfp4_format_from_config("compressed-tensors", "float-quantized", NULL),
			 LYNN_NVFP4_NONE);
	ck_assert_int_eq(lynn_nvfp4_format_from_config("modelopt", NULL, "NVFP4"), LYNN_NVFP4_MODELOPT);
	ck_assert_int_eq(lynn_nvfp4_format_from_config(NULL, NULL, "W4A16_NVFP4"), LYNN_NVFP4_MODELOPT);
	ck_assert_int_eq(lynn_nvfp4_format_from_config("modelopt", NULL, "FP8"), LYNN_NVFP4_NONE);
}
END_TEST

/* ===== CPU kernel vs f64 ===== */

/* (K, M): the SIMD path for 1..4 tokens (and an odd block count, which
 * ends its two-accumulator loop with a single block), more tokens, and a
 * row longer than the kernel's 1024-block scale segment */
static const struct {
	int64_t k, m;
} cpu_kernel_cases[] = { { 96, 1 },  { 80, 1 }, { 80, 2 },   { 96, 3 },
			 { 80, 4 },  { 96, 6 }, { 80, 9 },   { 16480, 2 } };

START_TEST(test_cpu_kernel)
{
	const int64_t N = 37, K = cpu_kernel_cases[_i].k, M = cpu_kernel_cases[_i].m, LDX = K + 4,
		      LDY = 41;
	uint8_t *P = malloc((size_t)(N * K / 2)), *S = malloc((size_t)(N * K / 16));
	float *x = malloc(sizeof(float) * (size_t)(M * LDX)), *y = malloc(sizeof(float) * (size_t)(M * LDY));
	float *y2 = malloc(sizeof(float) * (size_t)(M * N));
	for (int64_t i = 0; i < N * K / 2; i++)
		P[i] = (uint8_t)(urand() * 256);
	for (int64_t i = 0; i < N * K / 16; i++)
		S[i] = (uint8_t)(0x01 + urand() * 0x7d); /* subnormal .. 448 */
	for (int64_t i = 0; i < M * LDX; i++)
		x[i] = gauss();
	struct lynn_nvfp4_view v = { P, S, 0.37f, N, K };
	for (int acc = 0; acc < 2; acc++) {
		for (int64_t i = 0; i < M * LDY; i++)
			y[i] = acc ? 1.5f : NAN;
		lynn_cpu_nvfp4_rows(&v, x, LDX, M, 0, 20, y, LDY, acc);
		lynn_cpu_nvfp4_rows(&v, x, LDX, M, 20, N, y, LDY, acc);
		for (int64_t t = 0; t < M; t++)
			for (int64_t r = 0; r < N; r++) {
				double ref = 0, mag = 0;
				for (int64_t k = 0; k < K; k++) {
					uint8_t b = P[r * K / 2 + k / 2];
					double w = (double)lynn_e2m1_to_f32((k & 1) ? b >> 4 : b & 15) *
						   lynn_e4m3_to_f32(S[r * K / 16 + k / 16]) * 0.37;
					ref += w * x[t * LDX + k];
					mag += fabs(w * x[t * LDX + k]);
				}
				if (acc)
					ref += 1.5;
				ck_assert_msg(fabs(y[t * LDY + r] - ref) <= TOL_KERNEL_REL * (mag + 1.5),
					      "t %lld r %lld: %g vs %g", (long long)t, (long long)r,
					      (double)y[t * LDY + r], ref);
			}
	}
	/* the portable twin and the pooled call agree with the rows call */
	float *xc = malloc(sizeof(float) * (size_t)(M * K));
	for (int64_t t = 0; t < M; t++)
		memcpy(xc + t * K, x + t * LDX, sizeof(float) * (size_t)K);
	lynn_cpu_nvfp4_matmul_ref(&v, xc, M, y2);
	float *y3 = malloc(sizeof(float) * (size_t)(M * N));
	ck_assert_int_eq(lynn_cpu_nvfp4_matmul(&v, xc, M, y3, NULL, NULL), 0);
	for (int64_t i = 0; i < M * N; i++)
		ck_assert(fabsf(y2[i] - y3[i]) <= 1e-4f * (1 + fabsf(y2[i])));
	free(xc);
	free(y3);
	free(P);
	free(S);
	free(x);
	free(y);
	free(y2);
}
END_TEST

/* ===== lynn quantize ===== */

/* A checkpoint's tensor list and its NVFP4 scan (caller frees *ts and
 * releases sc). */
static int64_t scan_ckpt(struct lynn_ckpt *c, const struct lynn_tensor ***ts,
			 struct lynn_nvfp4_scan *sc)
{
	struct lynn_err err = { 0 };
	int64_t n = lynn_ckpt_n_tensors(c);
	*ts = malloc(sizeof **ts * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		(*ts)[i] = lynn_ckpt_tensor(c, i);
	ck_assert_int_eq(lynn_nvfp4_scan(*ts, n, true, sc, &err), 0);
	return n;
}

static char *quantize_tiny(const char *fixture, const char *fmt)
{
	char *dir = tu_mkdtemp(), cmd[1024];
	snprintf(cmd, sizeof cmd, "quantize --nvfp4 --format %s %s/%s %s/out", fmt, FIXTURES, fixture,
		 dir);
	struct tu_run r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 0, "lynn %s: %s", cmd, r.err);
	tu_run_free(&r);
	char *out = lynn_path_join(dir, "out");
	free(dir);
	return out;
}

static const struct lynn_tensor *tfind(const struct lynn_ckpt *c, const char *name)
{
	const struct lynn_tensor *t = lynn_ckpt_find_decoder(c, name);
	ck_assert_msg(t != NULL, "tensor %s missing", name);
	return t;
}

static float f32_at(const struct lynn_tensor *t)
{
	float v;
	memcpy(&v, t->data, 4);
	return v;
}

/* max |x| over rows [r0, r1) of a (.., C) float tensor */
static float amax_rows(const struct lynn_tensor *t, int64_t r0, int64_t r1, int64_t C)
{
	float *row = malloc(sizeof(float) * (size_t)C), a = 0;
	for (int64_t r = r0; r < r1; r++) {
		ck_assert_int_eq(lynn_convert_to_f32(t->dtype,
						     (const uint8_t *)t->data + r * C * lynn_dtype_size(t->dtype),
						     row, (size_t)C, NULL), 0);
		for (int64_t j = 0; j < C; j++)
			a = fmaxf(a, fabsf(row[j]));
	}
	free(row);
	return a;
}

START_TEST(test_quantize_folder)
{
	/* _i: 0 CT from the fused-expert bf16 fixture, 1 ModelOpt from per-expert f32 */
	const char *fx = _i ? "qwen35moe-tiny-mm-f32" : "qwen35moe-tiny";
	const char *fmt = _i ? "modelopt" : "compressed-tensors";
	enum lynn_nvfp4_format f = _i ? LYNN_NVFP4_MODELOPT : LYNN_NVFP4_CT;
	struct lynn_err err = { 0 };
	char *out = quantize_tiny(fx, fmt), src[512];
	snprintf(src, sizeof src, "%s/%s", FIXTURES, fx);
	struct lynn_ckpt *c = lynn_ckpt_open(out, &err), *s = lynn_ckpt_open(src, &err);
	ck_assert_msg(c && s, "%s", err.msg);

	/* the rules pass and the split is the recipe's */
	const struct lynn_tensor **ts;
	struct lynn_nvfp4_scan sc;
	scan_ckpt(c, &ts, &sc);
	ck_assert_int_eq(sc.format, f);
	ck_assert_msg(sc.n_problems == 0, "%s", sc.problems[0]);
	/* per layer: 5 GDN or 4 attention projections, 3 shared-expert and 8x3 experts */
	ck_assert_int_eq(sc.n_linears, 2 * 5 + 2 * 4 + 4 * 3 + 4 * 24);
	ck_assert_int_eq(sc.n_expert_linears, 4 * 24);
	ck_assert(!sc.w4a4);
	lynn_nvfp4_scan_free(&sc);
	free(ts);
	ck_assert(lynn_ckpt_find_decoder(c, "lm_head.weight")->dtype != LYNN_DTYPE_U8);
	ck_assert(lynn_ckpt_find_decoder(c, "embed_tokens.weight")->dtype != LYNN_DTYPE_U8);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.0.mlp.gate.weight")->dtype != LYNN_DTYPE_U8);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.0.mlp.shared_expert_gate.weight")->dtype != LYNN_DTYPE_U8);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.0.linear_attn.conv1d.weight") != NULL);

	/* shared global scales: q/k/v of layer 1, gate/up of expert 3 of layer 0,
	 * each = the convention's scale of the group's max |W| in the source */
	const struct lynn_nvfp4_suffixes *sx = lynn_nvfp4_suffixes(f);
	char nm[256];
	float g[3], am = 0;
	const char *qkv[3] = { "q_proj", "k_proj", "v_proj" };
	for (int j = 0; j < 3; j++) {
		snprintf(nm, sizeof nm, "layers.1.self_attn.%s.%s", qkv[j], sx->global);
		g[j] = f32_at(tfind(c, nm));
		snprintf(nm, sizeof nm, "layers.1.self_attn.%s.weight", qkv[j]);
		const struct lynn_tensor *w = tfind(s, nm);
		am = fmaxf(am, amax_rows(w, 0, w->shape[0], w->shape[1]));
	}
	ck_assert(g[0] == g[1] && g[1] == g[2]);
	ck_assert(g[0] == lynn_nvfp4_global_scale(f, am));
	snprintf(nm, sizeof nm, "layers.0.mlp.experts.3.gate_proj.%s", sx->global);
	float gg = f32_at(tfind(c, nm));
	snprintf(nm, sizeof nm, "layers.0.mlp.experts.3.up_proj.%s", sx->global);
	ck_assert(gg == f32_at(tfind(c, nm)));
	if (_i == 0) { /* fused source: rows of expert 3 in gate_up_proj [E, 2I, H] */
		const struct lynn_tensor *gu = tfind(s, "layers.0.mlp.experts.gate_up_proj");
		ck_assert(gg == lynn_nvfp4_global_scale(f, amax_rows(gu, 3 * gu->shape[1], 4 * gu->shape[1],
								      gu->shape[2])));
	}
	if (f == LYNN_NVFP4_MODELOPT) { /* a 0-dim scalar, as ModelOpt */
		ck_assert_int_eq(tfind(c, nm)->n_dims, 0);
		char *hq = lynn_path_join(out, "hf_quant_config.json");
		cJSON *j = lynn_json_load(hq, 1 << 20, &err);
		ck_assert_msg(j != NULL, "%s", err.msg);
		cJSON *q = cJSON_GetObjectItem(j, "quantization");
		ck_assert_str_eq(cJSON_GetObjectItem(q, "quant_algo")->valuestring, "W4A16_NVFP4");
		ck_assert_int_eq(cJSON_GetObjectItem(q, "group_size")->valueint, 16);
		ck_assert(cJSON_GetArraySize(cJSON_GetObjectItem(q, "exclude_modules")) > 0);
		cJSON_Delete(j);
		free(hq);
	}
	/* config and ship files */
	char *cp = lynn_path_join(out, "config.json");
	cJSON *cfg = lynn_json_load(cp, 1 << 20, &err);
	ck_assert_msg(cfg != NULL, "%s", err.msg);
	cJSON *qc = cJSON_GetObjectItem(cfg, "quantization_config");
	ck_assert(qc != NULL);
	ck_assert_int_eq(lynn_nvfp4_format_from_config(
				 cJSON_GetStringValue(cJSON_GetObjectItem(qc, "quant_method")),
				 cJSON_GetStringValue(cJSON_GetObjectItem(qc, "format")),
				 cJSON_GetStringValue(cJSON_GetObjectItem(qc, "quant_algo"))),
			 f);
	cJSON *ign = cJSON_GetObjectItem(qc, "ignore");
	bool has_head = false;
	for (int i = 0; i < cJSON_GetArraySize(ign); i++)
		has_head |= !strcmp(cJSON_GetArrayItem(ign, i)->valuestring, "lm_head");
	ck_assert(has_head);
	cJSON_Delete(cfg);
	free(cp);
	const char *ship[] = { "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
			       "generation_config.json" };
	for (int i = 0; i < 4; i++) {
		char *p = lynn_path_join(out, ship[i]);
		ck_assert_msg(lynn_file_exists(p), "%s not copied", ship[i]);
		free(p);
	}
	lynn_ckpt_close(c);
	lynn_ckpt_close(s);
	lynn_rm_rf(out);
	free(out);
}
END_TEST

START_TEST(test_quantize_bad_input)
{
	char *dir = tu_mkdtemp(), *q = quantize_tiny("qwen35moe-tiny-text-bf16", "compressed-tensors");
	char cmd[1200];
	struct {
		const char *args;
		const char *needle;
	} t[] = {
		{ "quantize %s/out %s/a", "--nvfp4" },
		{ "quantize --nvfp4 --format gguf " FIXTURES "/qwen35moe-tiny %s/b", "--format" },
		{ "quantize --nvfp4 %s/missing %s/c", "missing" },
		{ "quantize --nvfp4 --ignore 're:(' " FIXTURES "/qwen35moe-tiny %s/d", "regular expression" },
		{ "quantize --nvfp4 QUANT %s/e", "already" },
		{ "quantize --nvfp4 " FIXTURES "/qwen35moe-tiny", "OUT_DIR" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char a[1024];
		if (strstr(t[i].args, "QUANT")) {
			snprintf(a, sizeof a, "quantize --nvfp4 %s %s/e", q, dir);
		} else {
			snprintf(a, sizeof a, t[i].args, dir, dir);
		}
		snprintf(cmd, sizeof cmd, "%s", a);
		struct tu_run r = tu_lynn(cmd, NULL, NULL);
		ck_assert_msg(r.status == 2, "'%s': exit %d (%s)", cmd, r.status, r.err);
		ck_assert_msg(strstr(r.err, t[i].needle), "'%s': stderr '%s'", cmd, r.err);
		tu_run_free(&r);
	}
	/* a non-empty OUT_DIR needs --force; nothing half-written is left */
	snprintf(cmd, sizeof cmd, "quantize --nvfp4 %s/qwen35moe-tiny %s", FIXTURES, q);
	struct tu_run r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_ne(r.status, 0);
	tu_run_free(&r);
	snprintf(cmd, sizeof cmd, "quantize --nvfp4 --ignore '*.self_attn.*' --ignore 're:.*linear_attn.*' --force %s/qwen35moe-tiny %s", FIXTURES, q);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 0, "%s", r.err);
	tu_run_free(&r);
	/* "re:" as compressed-tensors reads its lists: Python's syntax (\\d),
	 * matched from the start of the name only */
	static const struct {
		const char *pattern, *module;
		bool ignored;
	} pats[] = {
		{ "re:.*layers\\.\\d+\\.mlp\\.shared_expert\\.up_proj$", "model.layers.12.mlp.shared_expert.up_proj", true },
		{ "re:.*layers\\.\\d+\\.mlp\\.shared_expert\\.up_proj$", "model.layers.x.mlp.shared_expert.up_proj", false },
		{ "re:linear_attn", "model.layers.0.linear_attn.out_proj", false },
		{ "re:model\\.layers\\.0\\.", "model.layers.0.linear_attn.out_proj", true },
		{ "re:(?:.*\\.)?out_proj", "model.layers.0.linear_attn.out_proj", true },
		{ "*.out_proj", "model.layers.0.linear_attn.out_proj", true },
	};
	for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
		struct lynn_quantize_opts qo = { .ignore = &pats[i].pattern, .n_ignore = 1 };
		ck_assert_msg(lynn_nvfp4_rtn_wants(pats[i].module, &qo) == !pats[i].ignored, "%s on %s",
			      pats[i].pattern, pats[i].module);
	}
	struct lynn_err err = { 0 };
	struct lynn_ckpt *c = lynn_ckpt_open(q, &err);
	ck_assert(c != NULL);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.1.self_attn.q_proj.weight")->dtype == LYNN_DTYPE_BF16);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.0.linear_attn.in_proj_qkv.weight")->dtype == LYNN_DTYPE_BF16);
	ck_assert(lynn_ckpt_find_decoder(c, "layers.0.mlp.shared_expert.up_proj.weight_packed") != NULL);
	lynn_ckpt_close(c);
	lynn_rm_rf(dir);
	free(dir);
	char *parent = strdup(q);
	*strrchr(parent, '/') = 0;
	lynn_rm_rf(parent);
	free(parent);
	free(q);
}
END_TEST

/* ===== the runner on NVFP4 ===== */

/* Write an f32 copy of an NVFP4 checkpoint with every quantized linear
 * dequantized (lynn_nvfp4_dequant_row, checked against torch above). */
static void write_dequantized(const char *qdir, const char *out)
{
	struct lynn_err err = { 0 };
	struct lynn_ckpt *c = lynn_ckpt_open(qdir, &err);
	ck_assert_msg(c != NULL, "%s", err.msg);
	const struct lynn_tensor **ts;
	struct lynn_nvfp4_scan sc;
	int64_t n = scan_ckpt(c, &ts, &sc);
	struct lynn_st_writer *w = lynn_st_writer_create(out, 0, &err);
	ck_assert(w != NULL);
	char nm[300];
	for (int64_t i = 0; i < n; i++)
		if (!lynn_nvfp4_is_companion(sc.format, ts[i]->name, NULL) ||
		    (sc.format == LYNN_NVFP4_MODELOPT && ts[i]->dtype != LYNN_DTYPE_U8 &&
		     !strstr(ts[i]->name, "scale")))
			ck_assert_int_eq(lynn_st_writer_declare(w, ts[i]->name, ts[i]->dtype, ts[i]->n_dims,
								ts[i]->shape, &err), 0);
	for (int64_t l = 0; l < sc.n_linears; l++) {
		int64_t sh[2] = { sc.linears[l].n, sc.linears[l].k };
		snprintf(nm, sizeof nm, "%s.weight", sc.linears[l].base);
		ck_assert_int_eq(lynn_st_writer_declare(w, nm, LYNN_DTYPE_F32, 2, sh, &err), 0);
	}
	for (int64_t i = 0; i < n; i++)
		if (!lynn_nvfp4_is_companion(sc.format, ts[i]->name, NULL) ||
		    (sc.format == LYNN_NVFP4_MODELOPT && ts[i]->dtype != LYNN_DTYPE_U8 &&
		     !strstr(ts[i]->name, "scale")))
			ck_assert_int_eq(lynn_st_writer_write(w, ts[i]->data, ts[i]->nbytes, &err), 0);
	for (int64_t l = 0; l < sc.n_linears; l++) {
		const struct lynn_nvfp4_linear *L = &sc.linears[l];
		float *row = malloc(sizeof(float) * (size_t)L->k);
		for (int64_t r = 0; r < L->n; r++) {
			lynn_nvfp4_dequant_row(sc.format, (const uint8_t *)L->weight->data + r * L->k / 2,
					       (const uint8_t *)L->scale->data + r * L->k / 16,
					       f32_at(L->global), L->k, row);
			ck_assert_int_eq(lynn_st_writer_write(w, row, sizeof(float) * (size_t)L->k, &err), 0);
		}
		free(row);
	}
	ck_assert_msg(lynn_st_writer_finish(w, &err) == 0, "%s", err.msg);
	lynn_st_writer_free(w);
	char *a = lynn_path_join(qdir, "config.json"), *b = lynn_path_join(out, "config.json");
	ck_assert_int_eq(lynn_file_copy(a, b, &err), 0);
	free(a);
	free(b);
	lynn_nvfp4_scan_free(&sc);
	free(ts);
	lynn_ckpt_close(c);
}

/* m's logits at every position of ids, from one prefill */
static float *prefill_logits(struct lynn_model *m, const struct lynn_tensor *ids)
{
	struct lynn_err err = { 0 };
	int64_t V = lynn_model_n_vocab(m), T = ids->n_elems;
	float *out = malloc(sizeof(float) * (size_t)(T * V));
	struct lynn_seq *s = lynn_seq_create(m, &err);
	ck_assert_msg(s != NULL, "%s", err.msg);
	ck_assert_msg(lynn_model_prefill(m, s, ids->data, T, true, out, &err) == 0, "%s", err.msg);
	lynn_seq_free(s);
	return out;
}

/* Which linears run_logits_with puts random rank-4 adapters on: none;
 * every layer's shared-expert gate, up and down; or some of every layer's
 * input projections (in_proj_z and in_proj_a, k_proj: parts in the middle
 * and at the end of the stacked groups of the CUDA runner) */
enum adapters { ADAPT_NONE, ADAPT_SHARED, ADAPT_INPUTS };

/* The logits at every position of ids on device d, with adapters set
 * through lynn_model_lora_set (PEFT folders bind to dense checkpoints). */
static float *run_logits_with(const char *path, enum adapters on, const struct lynn_tensor *ids,
			      enum lynn_device d)
{
	struct lynn_err err = { 0 };
	struct lynn_model_opts o = { .n_threads = 2, .device = d };
	struct lynn_model *m = lynn_model_open(path, &o, &err);
	ck_assert_msg(m != NULL, "%s: %s", path, err.msg);
	const struct lynn_config *c = lynn_model_config(m);
	const int64_t R = 4, big = 8192 * R; /* A and B of up to 8192 rows or columns */
	float *ab = on != ADAPT_NONE ? malloc(sizeof(float) * (size_t)(2 * big)) : NULL;
	for (int64_t i = 0; ab && i < 2 * big; i++)
		ab[i] = (float)((i * 2654435761u) % 2001) * 1e-4f - 0.1f;
	for (int li = 0; ab && li < c->n_layers; li++) {
		static const char *const shared[] = { "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
						      "mlp.shared_expert.down_proj" };
		static const char *const delta[] = { "linear_attn.in_proj_z", "linear_attn.in_proj_a" };
		static const char *const attn[] = { "self_attn.k_proj" };
		const bool full = c->layer_types[li] == LYNN_LAYER_FULL;
		const char *const *proj = on == ADAPT_SHARED ? shared : full ? attn : delta;
		const int np = on == ADAPT_SHARED ? 3 : full ? 1 : 2;
		for (int j = 0; j < np; j++) {
			struct lynn_lora_ref r = { LYNN_DTYPE_F32, ab, ab + big, (int)R, 0.5f };
			char name[128];
			snprintf(name, sizeof name, "layers.%d.%s.weight", li, proj[j]);
			ck_assert_msg(lynn_model_lora_set(m, name, &r, &err) == 0, "%s: %s", name, err.msg);
		}
	}
	float *out = prefill_logits(m, ids);
	lynn_model_close(m);
	free(ab);
	return out;
}

/* The CPU runner's logits with a PEFT adapter folder loaded */
static float *run_logits_adapter(const char *path, const struct lynn_tensor *ids, const char *adapter)
{
	struct lynn_err err = { 0 };
	struct lynn_model_opts o = { .n_threads = 2, .device = LYNN_DEVICE_CPU };
	struct lynn_model *m = lynn_model_open(path, &o, &err);
	ck_assert_msg(m != NULL, "%s: %s", path, err.msg);
	struct lynn_lora *l = lynn_model_lora_load(m, adapter, &err);
	ck_assert_msg(l != NULL, "%s on %s: %s", adapter, path, err.msg);
	float *out = prefill_logits(m, ids);
	lynn_model_close(m);
	lynn_lora_free(l);
	return out;
}

static float *run_logits_on(const char *path, const struct lynn_tensor *ids, enum lynn_device d)
{
	return run_logits_with(path, ADAPT_NONE, ids, d);
}

/* The CPU runner (the f32 checks below; the CUDA runner has its own). */
static float *run_logits(const char *path, const struct lynn_tensor *ids)
{
	return run_logits_on(path, ids, LYNN_DEVICE_CPU);
}

/* per-position cosine between two (T, V) logit tables (mean, min), the
 * largest difference and the largest |b| */
struct cos_stats {
	double mean, min, dmax, amax;
};

static struct cos_stats cosines(const float *a, const float *b, int64_t T, int64_t V)
{
	struct cos_stats st = { 0, 1, 0, 0 };
	for (int64_t t = 0; t < T; t++) {
		double dot = 0, na = 0, nb = 0;
		for (int64_t v = 0; v < V; v++) {
			double x = a[t * V + v], y = b[t * V + v];
			dot += x * y;
			na += x * x;
			nb += y * y;
			st.dmax = fmax(st.dmax, fabs(x - y));
			st.amax = fmax(st.amax, fabs(y));
		}
		st.min = fmin(st.min, dot / sqrt(na * nb));
		st.mean += dot / sqrt(na * nb) / (double)T;
	}
	return st;
}

START_TEST(test_runner_nvfp4)
{
	/* _i: 0 CT (fused-expert fixture), 1 ModelOpt (sharded text-only f32) */
	const char *fx = _i ? "qwen35moe-tiny-text-f32" : "qwen35moe-tiny";
	char *q = quantize_tiny(fx, _i ? "modelopt" : "compressed-tensors");
	char *dq = lynn_path_join(q, "../dequant");
	struct lynn_err err = { 0 };
	ck_assert_int_eq(lynn_rm_rf(dq) >= -1, 1);
	write_dequantized(q, dq);
	struct lynn_st_file *refs = lynn_st_open(FIXTURES "/ref_logits.safetensors", &err);
	ck_assert(refs != NULL);
	const struct lynn_tensor *ids = lynn_st_find(refs, "ids.chat"), *hf = lynn_st_find(refs, "logits.chat");
	float *a = run_logits(q, ids), *b = run_logits(dq, ids);
	int64_t T = ids->n_elems, V = hf->shape[1];
	struct cos_stats vh = cosines(a, hf->data, T, V), vd = cosines(a, b, T, V);
	fprintf(stderr, "nvfp4 %s: logits vs HF bf16 cosine mean %.4f min %.4f over %lld positions; "
			"vs dequantized f32 max|d| %.2e\n",
		_i ? "modelopt" : "compressed-tensors", vh.mean, vh.min, (long long)T, vd.dmax);
	ck_assert_msg(vd.dmax <= TOL_NV_VS_DEQUANT_MAXABS, "nvfp4 vs dequant max|d| %g", vd.dmax);
	ck_assert_msg(vh.mean >= TOL_TINY_COS_MEAN, "cosine mean %g (min %g)", vh.mean, vh.min);
	/* A PEFT adapter folder on the NVFP4 checkpoint (its targets are
	 * quantized linears): the same logits as on the dequantized one, and
	 * not the logits without it; merging into it is refused, nothing
	 * written. */
	float *aa = run_logits_adapter(q, ids, FIXTURES "/lora-tiny");
	float *ba = run_logits_adapter(dq, ids, FIXTURES "/lora-tiny");
	struct cos_stats ad = cosines(aa, ba, T, V), an = cosines(aa, a, T, V);
	fprintf(stderr, "nvfp4 %s with lora-tiny: vs dequantized f32 with it max|d| %.2e (max|logit| %.3g); "
		"the adapter moved the logits by %.3g\n", _i ? "modelopt" : "compressed-tensors", ad.dmax,
		ad.amax, an.dmax);
	ck_assert_msg(ad.dmax <= TOL_NV_VS_DEQUANT_MAXABS, "with the adapter, nvfp4 vs dequant max|d| %g",
		      ad.dmax);
	ck_assert_msg(an.dmax > 1e-3 * (1 + an.amax), "the adapter changed nothing (max|d| %g)", an.dmax);
	char *merged = lynn_path_join(q, "../merged"), cmd[2048];
	snprintf(cmd, sizeof cmd, "merge --base %s --adapter %s/lora-tiny --output %s", q, FIXTURES, merged);
	struct tu_run r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 2 && strstr(r.err, "is NVFP4") && strstr(r.err, "then quantize"),
		      "lynn %s: exit %d: %s", cmd, r.status, r.err);
	ck_assert(!lynn_dir_exists(merged));
	tu_run_free(&r);
	free(merged);
	free(aa);
	free(ba);
	free(a);
	free(b);
	lynn_st_close(refs);
	char *parent = strdup(q);
	*strrchr(parent, '/') = 0;
	lynn_rm_rf(parent);
	free(parent);
	free(dq);
	free(q);
}
END_TEST

/* Restack an NVFP4 checkpoint's per-expert linears into fused 3-D tensors
 * (weight-formats.md §2: a leading expert dimension; gate and up
 * concatenated row-wise as `experts.gate_up_proj`, whose shared per-expert
 * global scale lynn quantize already wrote for the fused group), copying
 * everything else: the same model in the other layout. */
static const struct lynn_nvfp4_linear *find_linear(const struct lynn_nvfp4_scan *sc, const char *base)
{
	for (int64_t l = 0; l < sc->n_linears; l++)
		if (!strcmp(sc->linears[l].base, base))
			return &sc->linears[l];
	return NULL;
}

static void write_fused(const char *qdir, const char *out, int n_layers, int E, bool with_down)
{
	struct lynn_err err = { 0 };
	struct lynn_ckpt *c = lynn_ckpt_open(qdir, &err);
	ck_assert_msg(c != NULL, "%s", err.msg);
	const struct lynn_tensor **ts;
	struct lynn_nvfp4_scan sc;
	int64_t n = scan_ckpt(c, &ts, &sc);
	const struct lynn_nvfp4_suffixes *sx = lynn_nvfp4_suffixes(sc.format);
	const char *sfx[4] = { sx->weight, sx->scale, sx->global, sc.w4a4 ? sx->input : NULL };
	const char *groups[2][3] = { { "gate_up_proj", "gate_proj", "up_proj" },
				     { "down_proj", "down_proj", NULL } };
	struct lynn_st_writer *w = lynn_st_writer_create(out, 0, &err);
	ck_assert(w != NULL);
	char nm[300];
	for (int pass = 0; pass < 2; pass++) {
		for (int64_t i = 0; i < n; i++)
			if (!strstr(ts[i]->name, ".mlp.experts.")) {
				if (pass == 0)
					ck_assert_int_eq(lynn_st_writer_declare(w, ts[i]->name, ts[i]->dtype,
										ts[i]->n_dims, ts[i]->shape, &err), 0);
				else
					ck_assert_int_eq(lynn_st_writer_write(w, ts[i]->data, ts[i]->nbytes, &err), 0);
			}
		for (int li = 0; li < n_layers; li++)
			for (int gi = 0; gi < (with_down ? 2 : 1); gi++)
				for (int si = 0; si < 4 && sfx[si]; si++) {
					const struct lynn_nvfp4_linear *L[2] = { NULL, NULL };
					for (int e = 0; e < E; e++)
						for (int mi = 0; mi < 2 && groups[gi][1 + mi]; mi++) {
							snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.%s", li, e,
								 groups[gi][1 + mi]);
							L[mi] = find_linear(&sc, nm);
							ck_assert_msg(L[mi] != NULL, "%s", nm);
							const struct lynn_tensor *t = si == 0 ? L[mi]->weight
										    : si == 1 ? L[mi]->scale
										    : si == 2 ? L[mi]->global
											      : L[mi]->input;
							if (pass == 1 && (si < 2 || mi == 0))
								ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes,
												      &err), 0);
						}
					if (pass == 1)
						continue;
					/* gate and up share their tensor scales (one fused group) */
					if (si >= 2 && L[1])
						ck_assert(f32_at(si == 2 ? L[0]->global : L[0]->input) ==
							  f32_at(si == 2 ? L[1]->global : L[1]->input));
					int64_t rows = L[0]->n + (L[1] ? L[1]->n : 0);
					/* [E, rows, K/2 | K/16], or [E] for a tensor scale */
					int64_t sh3[3] = { E, rows, si == 0 ? L[0]->k / 2 : L[0]->k / 16 };
					snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%s.%s", li, groups[gi][0],
						 sfx[si]);
					ck_assert_int_eq(lynn_st_writer_declare(w, nm, si == 0 ? LYNN_DTYPE_U8
										    : si == 1 ? LYNN_DTYPE_F8_E4M3
											      : LYNN_DTYPE_F32,
										si < 2 ? 3 : 1, sh3, &err), 0);
				}
	}
	ck_assert_msg(lynn_st_writer_finish(w, &err) == 0, "%s", err.msg);
	lynn_st_writer_free(w);
	char *a = lynn_path_join(qdir, "config.json"), *b = lynn_path_join(out, "config.json");
	ck_assert_int_eq(lynn_file_copy(a, b, &err), 0);
	free(a);
	free(b);
	lynn_nvfp4_scan_free(&sc);
	free(ts);
	lynn_ckpt_close(c);
}

/* Fused 3-D NVFP4 experts run exactly like the per-expert ones: the same
 * bytes, viewed per expert, so the logits are identical. */
START_TEST(test_runner_nvfp4_fused)
{
	char *q = quantize_tiny("qwen35moe-tiny-text-f32", _i ? "modelopt" : "compressed-tensors");
	char *fz = lynn_path_join(q, "../fused");
	struct lynn_err err = { 0 };
	write_fused(q, fz, 4, 8, true);
	struct lynn_st_file *refs = lynn_st_open(FIXTURES "/ref_logits.safetensors", &err);
	ck_assert(refs != NULL);
	const struct lynn_tensor *ids = lynn_st_find(refs, "ids.chat");
	float *a = run_logits(q, ids), *b = run_logits(fz, ids);
	int64_t TV = ids->n_elems * 513;
	ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)TV) == 0,
		      "fused-expert logits differ from per-expert ones");
	/* a fused gate_up without its down_proj is refused, naming the tensor */
	char *bad = lynn_path_join(q, "../fused-broken");
	write_fused(q, bad, 4, 8, false);
	struct lynn_model_opts o = { .n_threads = 1 };
	struct lynn_model *m = lynn_model_open(bad, &o, &err);
	ck_assert(m == NULL);
	ck_assert_msg(strstr(err.msg, "experts.down_proj") != NULL, "%s", err.msg);
	free(bad);
	free(a);
	free(b);
	lynn_st_close(refs);
	char *parent = strdup(q);
	*strrchr(parent, '/') = 0;
	lynn_rm_rf(parent);
	free(parent);
	free(fz);
	free(q);
}
END_TEST

/* ===== CUDA (tag "cuda") ===== */

#ifdef LYNN_CUDA
/* a CUDA device is present; if not, says which test is skipped */
static bool cuda_present(const char *what)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
		return true;
	fprintf(stderr, "check_nvfp4: no CUDA device; %s skipped\n", what);
	return false;
}
#endif

START_TEST(test_cuda_kernels)
{
#ifdef LYNN_CUDA
	if (!cuda_present("kernel test (tests/bench/cuda_nvfp4.sh runs the full check on a GPU)"))
		return;
	const int64_t N = 128, K = 256;
	const int M = 3;
	uint8_t *P = malloc(N * K / 2), *S = malloc(N * K / 16);
	float alpha = 0.01f, *x = malloc(sizeof(float) * M * K), *ycpu = malloc(sizeof(float) * M * N);
	float *ygpu = malloc(sizeof(float) * M * N);
	uint16_t *xb = malloc(2 * M * K);
	for (int64_t i = 0; i < N * K / 2; i++)
		P[i] = (uint8_t)(urand() * 256);
	for (int64_t i = 0; i < N * K / 16; i++)
		S[i] = (uint8_t)(0x20 + urand() * 0x30);
	for (int64_t i = 0; i < M * K; i++) {
		xb[i] = lynn_f32_to_bf16(gauss());
		x[i] = lynn_bf16_to_f32(xb[i]);
	}
	struct lynn_nvfp4_view v = { P, S, alpha, N, K };
	lynn_cpu_nvfp4_matmul_ref(&v, x, M, ycpu);
	void *dP, *dS, *dA, *dX, *dY;
	cudaMalloc(&dP, N * K / 2);
	cudaMalloc(&dS, N * K / 16);
	cudaMalloc(&dA, 4);
	cudaMalloc(&dX, 2 * M * K);
	cudaMalloc(&dY, 4 * M * N);
	cudaMemcpy(dP, P, N * K / 2, cudaMemcpyHostToDevice);
	cudaMemcpy(dS, S, N * K / 16, cudaMemcpyHostToDevice);
	cudaMemcpy(dA, &alpha, 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dX, xb, 2 * M * K, cudaMemcpyHostToDevice);
	struct lynn_cuda_nvfp4_weight w = { dP, dS, dA, N, K, 1 };
	for (int path = 1; path < LYNN_CUDA_PATH_COUNT; path++) {
		struct lynn_err err = { 0 };
		cudaMemset(dY, 0xff, 4 * M * N);
		ck_assert_msg(lynn_cuda_nvfp4_gemm_path(&w, dX, M, dY, LYNN_CUDA_OUT_F32,
							(enum lynn_cuda_path)path, NULL, &err) == 0,
			      "%s", err.msg);
		cudaMemcpy(ygpu, dY, 4 * M * N, cudaMemcpyDeviceToHost);
		for (int64_t i = 0; i < M * N; i++)
			ck_assert_msg(fabsf(ygpu[i] - ycpu[i]) <= 1e-3f * (1 + fabsf(ycpu[i])),
				      "path %d i %lld", path, (long long)i);
	}
	cudaFree(dP);
	cudaFree(dS);
	cudaFree(dA);
	cudaFree(dX);
	cudaFree(dY);
	free(P);
	free(S);
	free(x);
	free(xb);
	free(ycpu);
	free(ygpu);
#else
	fprintf(stderr, "check_nvfp4: built without CUDA; kernel test skipped\n");
#endif
}
END_TEST

/* lynn_cuda_nvfp4_stacked_gemm: linears of 3 shapes stacked in chunks of 32
 * and of 16 rows, each part with its own tensor multiplier, at M = 1, 5, 12
 * and 16, both output types, each part's columns against the f64 reference
 * of that part alone (the bounds of cuda_nvfp4.sh's checks: 1e-3 relative
 * for f32 output, 4e-3 for bf16, whose own rounding is up to 2^-8), into
 * NaN-poisoned outputs; then the calls it must refuse. The third stack has
 * the DeltaNet input's size (385 chunks: more than a wave of 2 blocks per
 * SM, so the kernel's 3-block configuration). */
START_TEST(test_cuda_stacked)
{
#ifdef LYNN_CUDA
	if (!cuda_present("stacked kernel test"))
		return;
	const int64_t K = 1024, rows[3][3] = { { 96, 32, 64 }, { 48, 16, 32 }, { 8192, 4096, 32 } };
	const int64_t chunk[3] = { 32, 16, 32 };
	const float alphas[3] = { 0.01f, 0.003f, 0.02f };
	const int Ms[4] = { 1, 5, 12, 16 }, MM = 16;
	for (int v = 0; v < 3; v++) {
		int64_t N = rows[v][0] + rows[v][1] + rows[v][2], nc = N / chunk[v];
		uint8_t *P = malloc(N * K / 2), *S = malloc(N * K / 16);
		float *al = malloc(sizeof(float) * nc), *x = malloc(sizeof(float) * MM * K);
		float *ref = malloc(sizeof(float) * MM * N), *part = malloc(sizeof(float) * MM * N);
		float *y = malloc(sizeof(float) * MM * N);
		uint16_t *xb = malloc(2 * MM * K), *yb = malloc(2 * MM * N);
		for (int64_t i = 0; i < N * K / 2; i++)
			P[i] = (uint8_t)(urand() * 256);
		for (int64_t i = 0; i < N * K / 16; i++)
			S[i] = (uint8_t)(0x20 + urand() * 0x30);
		for (int64_t i = 0; i < MM * K; i++) {
			xb[i] = lynn_f32_to_bf16(gauss());
			x[i] = lynn_bf16_to_f32(xb[i]);
		}
		/* the reference: each part alone, its columns side by side */
		for (int64_t j = 0, r0 = 0; j < 3; r0 += rows[v][j++]) {
			struct lynn_nvfp4_view pv = { P + r0 * K / 2, S + r0 * K / 16, alphas[j], rows[v][j], K };
			lynn_cpu_nvfp4_matmul_ref(&pv, x, MM, part);
			for (int t = 0; t < MM; t++)
				for (int64_t r = 0; r < rows[v][j]; r++)
					ref[t * N + r0 + r] = part[t * rows[v][j] + r];
			for (int64_t c = 0; c < rows[v][j] / chunk[v]; c++)
				al[r0 / chunk[v] + c] = alphas[j];
		}
		void *dP, *dS, *dA, *dX, *dY;
		cudaMalloc(&dP, N * K / 2);
		cudaMalloc(&dS, N * K / 16);
		cudaMalloc(&dA, sizeof(float) * nc);
		cudaMalloc(&dX, 2 * MM * K);
		cudaMalloc(&dY, 4 * MM * N);
		cudaMemcpy(dP, P, N * K / 2, cudaMemcpyHostToDevice);
		cudaMemcpy(dS, S, N * K / 16, cudaMemcpyHostToDevice);
		cudaMemcpy(dA, al, sizeof(float) * nc, cudaMemcpyHostToDevice);
		cudaMemcpy(dX, xb, 2 * MM * K, cudaMemcpyHostToDevice);
		struct lynn_cuda_nvfp4_weight w = { dP, dS, dA, chunk[v], K, nc };
		for (int mi = 0; mi < 4; mi++)
			for (int o = 0; o < 2; o++) {
				const int M = Ms[mi];
				struct lynn_err err = { 0 };
				cudaMemset(dY, 0xff, 4 * MM * N);
				ck_assert_msg(lynn_cuda_nvfp4_stacked_gemm(&w, dX, M, dY, o ? LYNN_CUDA_OUT_BF16
											   : LYNN_CUDA_OUT_F32,
									   NULL, &err) == 0, "%s", err.msg);
				ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
				if (o) {
					cudaMemcpy(yb, dY, 2 * M * N, cudaMemcpyDeviceToHost);
					for (int64_t i = 0; i < M * N; i++)
						y[i] = lynn_bf16_to_f32(yb[i]);
				} else {
					cudaMemcpy(y, dY, 4 * M * N, cudaMemcpyDeviceToHost);
				}
				const float tol = o ? 4e-3f : 1e-3f;
				for (int64_t i = 0; i < M * N; i++)
					ck_assert_msg(fabsf(y[i] - ref[i]) <= tol * (1 + fabsf(ref[i])),
						      "chunks of %lld, M %d, %s: [%lld][%lld] %g against %g",
						      (long long)chunk[v], M, o ? "bf16" : "f32",
						      (long long)(i / N), (long long)(i % N), y[i], ref[i]);
			}
		/* refused: M above 16, chunks of 48 rows, K too short for the
		 * chunk's K groups, K not whole spans */
		struct lynn_err err = { 0 };
		struct lynn_cuda_nvfp4_weight bad = w;
		ck_assert_int_eq(lynn_cuda_nvfp4_stacked_gemm(&w, dX, 17, dY, LYNN_CUDA_OUT_F32, NULL, &err),
				 -LYNN_EINVAL);
		bad.n = 48;
		ck_assert_int_eq(lynn_cuda_nvfp4_stacked_gemm(&bad, dX, 1, dY, LYNN_CUDA_OUT_F32, NULL, &err),
				 -LYNN_EINVAL);
		bad = w;
		bad.k = 128 * (128 / chunk[v] - 1);
		ck_assert_int_eq(lynn_cuda_nvfp4_stacked_gemm(&bad, dX, 1, dY, LYNN_CUDA_OUT_F32, NULL, &err),
				 -LYNN_EINVAL);
		bad.k = K - 32;
		ck_assert_int_eq(lynn_cuda_nvfp4_stacked_gemm(&bad, dX, 1, dY, LYNN_CUDA_OUT_F32, NULL, &err),
				 -LYNN_EINVAL);
		ck_assert(strstr(err.msg, "stacked") != NULL);
		cudaFree(dP);
		cudaFree(dS);
		cudaFree(dA);
		cudaFree(dX);
		cudaFree(dY);
		free(P);
		free(S);
		free(al);
		free(x);
		free(ref);
		free(part);
		free(y);
		free(xb);
		free(yb);
	}
#else
	fprintf(stderr, "check_nvfp4: built without CUDA; stacked kernel test skipped\n");
#endif
}
END_TEST

/* The CUDA runner on an NVFP4 checkpoint written by lynn quantize, against
 * the CPU runner on the same files. The CUDA path is W4A16: each NVFP4
 * linear's input is rounded to bf16 (the CPU keeps f32), so the two differ
 * by that rounding carried through the layers. */
START_TEST(test_cuda_runner_nvfp4)
{
#ifdef LYNN_CUDA
	if (!cuda_present("runner test"))
		return;
	const char *fx = _i ? "qwen35moe-tiny-text-f32" : "qwen35moe-tiny";
	char *q = quantize_tiny(fx, _i ? "modelopt" : "compressed-tensors");
	struct lynn_err err = { 0 };
	struct lynn_st_file *refs = lynn_st_open(FIXTURES "/ref_logits.safetensors", &err);
	ck_assert(refs != NULL);
	const struct lynn_tensor *ids = lynn_st_find(refs, "ids.chat"), *hf = lynn_st_find(refs, "logits.chat");
	float *g = run_logits_on(q, ids, LYNN_DEVICE_CUDA), *c = run_logits_on(q, ids, LYNN_DEVICE_CPU);
	int64_t T = ids->n_elems, V = hf->shape[1];
	struct cos_stats cc = cosines(g, c, T, V), ch = cosines(g, hf->data, T, V);
	fprintf(stderr, "nvfp4 %s cuda vs cpu: cosine mean %.6f min %.6f, max|d| %.3g (max|logit| "
		"%.3g); vs HF bf16 cosine mean %.4f\n", _i ? "modelopt" : "compressed-tensors", cc.mean,
		cc.min, cc.dmax, cc.amax, ch.mean);
	ck_assert_msg(cc.mean >= TOL_CUDA_NV_COS_MEAN, "cosine mean %g (min %g)", cc.mean, cc.min);
	ck_assert_msg(ch.mean >= TOL_TINY_COS_MEAN, "vs HF: cosine mean %g", ch.mean);
	free(g);
	free(c);
	lynn_st_close(refs);
	char *parent = strdup(q);
	*strrchr(parent, '/') = 0;
	lynn_rm_rf(parent);
	free(parent);
	free(q);
#else
	fprintf(stderr, "check_nvfp4: built without CUDA; runner test skipped\n");
#endif
}
END_TEST

#ifdef LYNN_CUDA
/* A temporary folder with a random 4-layer checkpoint of the bench's
 * mid-size shapes (gen_bench_model.py --small: hidden 1024, 64 experts
 * top-8, moe 256) in bf16 and its lynn quantize --nvfp4 copy: dir/bf16,
 * dir/nv. */
static char *small_models(void)
{
	char *dir = tu_mkdtemp(), cmd[2048];
	snprintf(cmd, sizeof cmd, "python3 tests/tools/gen_bench_model.py %s/bf16 --small", dir);
	struct tu_run r = tu_sh(cmd, NULL);
	ck_assert_msg(r.status == 0, "%s: %s", cmd, r.err);
	tu_run_free(&r);
	snprintf(cmd, sizeof cmd, "quantize --nvfp4 %s/bf16 %s/nv", dir, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 0, "lynn %s: %s", cmd, r.err);
	tu_run_free(&r);
	return dir;
}

/* n token ids spread over the small models' vocabulary, in idv */
static struct lynn_tensor spread_ids(int32_t *idv, int n)
{
	for (int i = 0; i < n; i++)
		idv[i] = (i * 7919 + 13) % 32768;
	return (struct lynn_tensor){ .name = "ids", .dtype = LYNN_DTYPE_I32, .n_dims = 1, .shape = { n },
				     .n_elems = n, .data = idv, .nbytes = (uint64_t)n * 4 };
}

/* Two runs' logits within TOL_SHARED_BANK_*: the same sums in another order */
static bool reordered(struct cos_stats d)
{
	return d.min >= TOL_SHARED_BANK_COS_MIN && d.dmax <= TOL_SHARED_BANK_MAXABS_REL * (1 + d.amax);
}
#endif

/* The fused expert MLP of the CUDA runner (gate/up, SwiGLU and down in two
 * launches over one [gate; up] bank) needs H and I multiples of 128, which
 * the tiny fixtures are not: a random 4-layer checkpoint of the bench's
 * mid-size shapes (gen_bench_model.py --small: hidden 1024, 64 experts
 * top-8, moe 256), quantized by lynn, on the GPU with the fused MLP and
 * with it off (LYNN_CUDA_NO_FUSED_MLP: two banks, the separate SwiGLU).
 * Both are W4A16 with the same products and the same roundings but for
 * SwiGLU's exp (the fused kernel's __expf): where the two exps differ in
 * the last bit, the activation's bf16 rounding can differ by one unit, so
 * they agree as sums in another order do (TOL_SHARED_BANK_*; bit for bit
 * on the H200 on 2026-12-01, 1.5e-3 apart with 3.1 the largest logit after
 * the prefill's delta rule changed its sums' order, 2026-12-02). The 24-row
 * prefill groups the expert slots in tiles (k_moe_tiles), which must give
 * the products a slot at a time give (LYNN_CUDA_NO_EXPERT_TILES), bit for
 * bit. Their distance to the CPU runner (f32 activations) is printed: the
 * W4A16 rounding on this model (cosine mean 0.9968 there, against 0.9998 on
 * the tiny fixtures). */
START_TEST(test_cuda_runner_expert_mlp)
{
#ifdef LYNN_CUDA
	if (!cuda_present("expert MLP test"))
		return;
	char *dir = small_models();
	int32_t idv[24];
	struct lynn_tensor ids = spread_ids(idv, 24);
	char *nv = lynn_path_join(dir, "nv");
	/* f: the routed and the shared experts in one expert MLP call; s: the
	 * shared expert on its own; u: gate and up as two banks throughout */
	float *f = run_logits_on(nv, &ids, LYNN_DEVICE_CUDA);
	setenv("LYNN_CUDA_NO_EXPERT_TILES", "1", 1);
	float *ft = run_logits_on(nv, &ids, LYNN_DEVICE_CUDA);
	unsetenv("LYNN_CUDA_NO_EXPERT_TILES");
	struct cos_stats tiles = cosines(f, ft, 24, 32768);
	ck_assert_msg(tiles.dmax == 0.0, "expert tiles vs a slot at a time: max|d| %g", tiles.dmax);
	free(ft);
	setenv("LYNN_CUDA_NO_SHARED_BANK", "1", 1);
	float *s = run_logits_on(nv, &ids, LYNN_DEVICE_CUDA);
	unsetenv("LYNN_CUDA_NO_SHARED_BANK");
	setenv("LYNN_CUDA_NO_FUSED_MLP", "1", 1);
	float *u = run_logits_on(nv, &ids, LYNN_DEVICE_CUDA);
	unsetenv("LYNN_CUDA_NO_FUSED_MLP");
	float *c = run_logits_on(nv, &ids, LYNN_DEVICE_CPU);
	struct cos_stats su = cosines(s, u, 24, 32768), fs = cosines(f, s, 24, 32768);
	struct cos_stats fc = cosines(f, c, 24, 32768);
	fprintf(stderr, "nvfp4 expert MLP on the GPU, fused vs two banks: max|d| %.3g (max|logit| %.3g); "
		"shared expert in the call vs on its own: cosine min %.7f, max|d| %.3g; fused vs the CPU "
		"runner: cosine mean %.6f min %.6f\n", su.dmax, su.amax, fs.min, fs.dmax, fc.mean, fc.min);
	ck_assert_msg(reordered(su), "fused vs two banks: cosine min %g, max|d| %g", su.min, su.dmax);
	ck_assert_msg(reordered(fs), "shared expert in the call: cosine min %g, max|d| %g", fs.min, fs.dmax);
	/* An adapter on the shared expert takes it out of the call again: its
	 * three products then read the bank's copy of its weights, and must
	 * give what its own upload gives, bit for bit (and differ from no
	 * adapter). */
	float *fa = run_logits_with(nv, ADAPT_SHARED, &ids, LYNN_DEVICE_CUDA);
	setenv("LYNN_CUDA_NO_SHARED_BANK", "1", 1);
	float *sa = run_logits_with(nv, ADAPT_SHARED, &ids, LYNN_DEVICE_CUDA);
	unsetenv("LYNN_CUDA_NO_SHARED_BANK");
	struct cos_stats as = cosines(fa, sa, 24, 32768), af = cosines(fa, f, 24, 32768);
	fprintf(stderr, "with an adapter on the shared expert: bank's copy vs its own max|d| %.3g; vs no "
		"adapter max|d| %.3g\n", as.dmax, af.dmax);
	ck_assert_msg(as.dmax == 0.0, "adapter on: bank's copy vs own upload max|d| %g", as.dmax);
	ck_assert_msg(af.dmax > 1e-3 * (1 + af.amax), "the adapter changed nothing (max|d| %g)", af.dmax);
	free(fa);
	free(sa);
	free(f);
	free(s);
	free(u);
	free(c);
	free(nv);
	lynn_rm_rf(dir);
	free(dir);
#else
	fprintf(stderr, "check_nvfp4: built without CUDA; expert MLP test skipped\n");
#endif
}
END_TEST

/* The CUDA runner's stacked input projections (one product for a layer's
 * qkv, z, b and a, or q, k and v, and one for the router and the shared
 * expert's gate) against each linear on its own (LYNN_CUDA_NO_STACK), on
 * the 4-layer mid-size shapes (gen_bench_model.py --small) in bf16 and
 * quantized by lynn, with 12 tokens (a pass of decode size, where NVFP4
 * stacks; a longer prefill runs its NVFP4 parts apart) and with adapters on
 * parts inside the stacks. bf16: the same rows computed the same way, so
 * bit for bit. NVFP4: the DeltaNet stack splits K as in_proj_qkv alone does
 * (8 groups at K 1024), the attention stack's chunks of 32 rows split it
 * over 4 where q_proj alone splits it over 8: the same sums in another
 * order, bounded as TOL_SHARED_BANK_* bounds that. */
START_TEST(test_cuda_runner_stacked)
{
#ifdef LYNN_CUDA
	if (!cuda_present("stacked projections test"))
		return;
	char *dir = small_models();
	int32_t idv[12];
	struct lynn_tensor ids = spread_ids(idv, 12);
	for (int v = 0; v < 2; v++) {
		char *path = lynn_path_join(dir, v ? "nv" : "bf16");
		float *st[2], *ap[2];
		for (int off = 0; off < 2; off++) {
			if (off)
				setenv("LYNN_CUDA_NO_STACK", "1", 1);
			st[off] = run_logits_with(path, ADAPT_NONE, &ids, LYNN_DEVICE_CUDA);
			ap[off] = run_logits_with(path, ADAPT_INPUTS, &ids, LYNN_DEVICE_CUDA);
			unsetenv("LYNN_CUDA_NO_STACK");
		}
		struct cos_stats d0 = cosines(st[0], st[1], 12, 32768), d1 = cosines(ap[0], ap[1], 12, 32768);
		struct cos_stats da = cosines(ap[0], st[0], 12, 32768);
		fprintf(stderr, "%s stacked vs apart on the GPU: cosine min %.7f, max|d| %.3g (max|logit| %.3g); "
			"with adapters on stacked parts: cosine min %.7f, max|d| %.3g; the adapters moved the "
			"logits by %.3g\n", v ? "nvfp4" : "bf16", d0.min, d0.dmax, d0.amax, d1.min, d1.dmax,
			da.dmax);
		if (!v) {
			ck_assert_msg(d0.dmax == 0.0 && d1.dmax == 0.0, "bf16 stacked vs apart: max|d| %g, %g",
				      d0.dmax, d1.dmax);
		} else {
			ck_assert_msg(reordered(d0), "nvfp4 stacked vs apart: cosine min %g, max|d| %g", d0.min,
				      d0.dmax);
			ck_assert_msg(reordered(d1), "nvfp4 with adapters, stacked vs apart: cosine min %g, max|d| %g",
				      d1.min, d1.dmax);
		}
		ck_assert_msg(da.dmax > 1e-3 * (1 + da.amax), "the adapters changed nothing (max|d| %g)", da.dmax);
		for (int i = 0; i < 2; i++) {
			free(st[i]);
			free(ap[i]);
		}
		free(path);
	}
	lynn_rm_rf(dir);
	free(dir);
#else
	fprintf(stderr, "check_nvfp4: built without CUDA; stacked projections test skipped\n");
#endif
}
END_TEST

Suite *nvfp4_suite(void)
{
	Suite *s = suite_create("nvfp4");
	TCase *tc = tcase_create("formats");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_e2m1_every_code);
	tcase_add_test(tc, test_e2m1_rounding);
	tcase_add_test(tc, test_e4m3);
	tcase_add_test(tc, test_dequant_hand);
	tcase_add_test(tc, test_dequant_matches_torch);
	tcase_add_test(tc, test_quantize_bounds);
	tcase_add_test(tc, test_scan_rules);
	tcase_add_loop_test(tc, test_cpu_kernel, 0,
			    (int)(sizeof cpu_kernel_cases / sizeof cpu_kernel_cases[0]));
	suite_add_tcase(s, tc);
	TCase *tq = tcase_create("quantize");
	tcase_set_timeout(tq, 300);
	tcase_add_loop_test(tq, test_quantize_folder, 0, 2);
	tcase_add_test(tq, test_quantize_bad_input);
	tcase_add_loop_test(tq, test_runner_nvfp4, 0, 2);
	tcase_add_loop_test(tq, test_runner_nvfp4_fused, 0, 2);
	suite_add_tcase(s, tq);
	TCase *tg = tcase_create("cuda");
	tcase_set_tags(tg, "cuda");
	tcase_add_test(tg, test_cuda_kernels);
	tcase_add_test(tg, test_cuda_stacked);
	tcase_set_timeout(tg, 300);
	tcase_add_loop_test(tg, test_cuda_runner_nvfp4, 0, 2);
	tcase_add_test(tg, test_cuda_runner_expert_mlp);
	tcase_add_test(tg, test_cuda_runner_stacked);
	suite_add_tcase(s, tg);
	return s;
}
