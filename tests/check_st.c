/*
 * check_st.c - src/formats (safetensors reader, checkpoints, writer, dtype
 * conversions), src/model/config.c and `lynn inspect`.
 *
 * Oracles (TESTING.md): the tiny checkpoints in tests/fixtures were written by
 * Hugging Face safetensors/transformers (tests/tools/gen_fixtures.py), so the
 * writer must reproduce them byte for byte; the bf16 and f32 fixtures hold the
 * same bf16-rounded values, so one checks the other's conversions; numpy
 * made dtype_f16_ref.bin; torch made nvfp4_ref.safetensors (E4M3 scales);
 * inspect_expected.json was computed by tests/tools/gen_inspect_expected.py
 * from the headers with Python's json. Bit patterns below follow IEEE 754 and
 * the OCP FP8 definition.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "lynn/config.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/st.h"
#include "testutil.h"

#define TINY FIXTURES "/qwen35moe-tiny"
#define TINY_MM_F32 FIXTURES "/qwen35moe-tiny-mm-f32"
#define TINY_TEXT_F32 FIXTURES "/qwen35moe-tiny-text-f32"
#define TINY_TEXT_BF16 FIXTURES "/qwen35moe-tiny-text-bf16"

/* dequantized NVFP4 vs torch: both exact products of small binary
 * fractions, then one f32 division; allow 1 ulp of that division */
#define TOL_NVFP4_REL 1.2e-7

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bitsf(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* ===== dtypes ===== */

START_TEST(test_dtype_names)
{
	static const char *const names[] = { "BOOL", "U8",  "I8",  "F8_E4M3", "F8_E5M2",
					     "I16",  "U16", "F16", "BF16",    "I32",
					     "U32",  "F32", "I64", "U64",     "F64" };
	static const size_t sizes[] = { 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8 };
	enum lynn_dtype dt;
	ck_assert_int_eq(LYNN_DTYPE_COUNT, 15);
	for (int i = 0; i < 15; i++) {
		ck_assert(lynn_dtype_parse(names[i], &dt));
		ck_assert_str_eq(lynn_dtype_name(dt), names[i]);
		ck_assert_uint_eq(lynn_dtype_size(dt), sizes[i]);
	}
	ck_assert(!lynn_dtype_parse("bf16", &dt));
	ck_assert(!lynn_dtype_parse("F4", &dt));
	ck_assert_ptr_null(lynn_dtype_name(LYNN_DTYPE_COUNT));
}
END_TEST

START_TEST(test_bf16_bits)
{
	static const struct {
		uint32_t in;
		uint16_t out;
	} cases[] = {
		{ 0x3F800000, 0x3F80 }, /* 1.0 */
		{ 0x3F808000, 0x3F80 }, /* tie, kept even */
		{ 0x3F818000, 0x3F82 }, /* tie, rounds up to even */
		{ 0x3F808001, 0x3F81 }, /* above the tie */
		{ 0x3F807FFF, 0x3F80 }, /* below the tie */
		{ 0x80000000, 0x8000 }, /* -0 */
		{ 0x7F800000, 0x7F80 }, /* inf */
		{ 0xFF800000, 0xFF80 }, /* -inf */
		{ 0x7F7FFFFF, 0x7F80 }, /* FLT_MAX rounds to inf */
		{ 0x7F7F7FFF, 0x7F7F }, /* just below: stays finite */
		{ 0x00000001, 0x0000 }, /* smallest subnormal rounds to 0 */
		{ 0x00008000, 0x0000 }, /* subnormal tie, even */
		{ 0x00018000, 0x0002 }, /* subnormal tie, up to even */
		{ 0x00010000, 0x0001 }, /* exact bf16 subnormal */
		{ 0x7FC00000, 0x7FC0 }, /* quiet NaN */
		{ 0xFFC00001, 0xFFC0 }, /* negative NaN with payload */
		{ 0x7F800001, 0x7FC0 }, /* signalling NaN stays NaN, made quiet */
		{ 0x7FFFFFFF, 0x7FFF }, /* NaN that would carry into the sign */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		ck_assert_msg(lynn_f32_to_bf16(bitsf(cases[i].in)) == cases[i].out,
			      "bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in,
			      lynn_f32_to_bf16(bitsf(cases[i].in)), cases[i].out);
	/* every bf16 value converts to f32 and back unchanged */
	for (uint32_t h = 0; h < 65536; h++) {
		float f = lynn_bf16_to_f32((uint16_t)h);
		ck_assert_uint_eq(fbits(f), h << 16);
		if (!isnan(f))
			ck_assert_uint_eq(lynn_f32_to_bf16(f), h);
	}
}
END_TEST

/* the value of an f16 code from the IEEE 754 definition */
static double f16_def(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
	if (e == 31)
		v = m ? NAN : INFINITY;
	return s ? -v : v;
}

START_TEST(test_f16)
{
	size_t len;
	char *buf = tu_read(FIXTURES "/dtype_f16_ref.bin", &len);
	uint32_t n;

	for (uint32_t h = 0; h < 65536; h++) {
		double d = f16_def((uint16_t)h);
		float f = lynn_f16_to_f32((uint16_t)h);
		if (isnan(d)) {
			ck_assert(isnan(f));
			ck_assert_uint_eq(lynn_f32_to_f16(f) & 0xFE00u, (h & 0x8000u) | 0x7E00u);
			continue;
		}
		ck_assert_msg((double)f == d, "f16 0x%04x", h);
		ck_assert_uint_eq(lynn_f32_to_f16(f), h);
	}
	/* numpy's float32 -> float16 (round to nearest even) */
	ck_assert_ptr_nonnull(buf);
	memcpy(&n, buf, 4);
	ck_assert_uint_eq(len, 4 + (size_t)n * 6);
	for (uint32_t i = 0; i < n; i++) {
		float f;
		uint16_t want;
		memcpy(&f, buf + 4 + 4 * (size_t)i, 4);
		memcpy(&want, buf + 4 + 4 * (size_t)n + 2 * (size_t)i, 2);
		ck_assert_msg(lynn_f32_to_f16(f) == want, "f16(0x%08x) = 0x%04x, numpy 0x%04x",
			      fbits(f), lynn_f32_to_f16(f), want);
	}
	free(buf);
}
END_TEST

START_TEST(test_e4m3_all_codes)
{
	/* OCP FP8 E4M3 ("fn"): S.EEEE.MMM, bias 7, subnormals at E=0, no inf,
	 * S.1111.111 NaN. In units of 2^-9 every finite code is an integer:
	 * E=0 -> M, else (8+M) << (E-1). */
	for (int b = 0; b < 256; b++) {
		int e = (b >> 3) & 15, m = b & 7;
		float v = lynn_e4m3_to_f32((uint8_t)b);
		if (e == 15 && m == 7) {
			ck_assert_msg(isnan(v), "code 0x%02x must be NaN", b);
			continue;
		}
		{
			long units = e ? (long)(8 + m) << (e - 1) : m;
			double want = ldexp((double)units, -9) * (b & 0x80 ? -1 : 1);
			ck_assert_msg((double)v == want, "e4m3 0x%02x = %g, want %g", b, v, want);
			ck_assert(!!signbit(v) == !!(b & 0x80));
		}
	}
	ck_assert(lynn_e4m3_to_f32(0x7E) == 448.0f);
	ck_assert(lynn_e4m3_to_f32(0x38) == 1.0f);
	ck_assert(lynn_e4m3_to_f32(0x01) == 0x1p-9f);
	ck_assert(lynn_e4m3_to_f32(0x08) == 0x1p-6f);
}
END_TEST

/* torch's float8_e4m3fn decode through the NVFP4 reference dequant */
START_TEST(test_e4m3_vs_torch)
{
	static const float e2m1[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open(FIXTURES "/nvfp4_ref.safetensors", &e);
	const struct lynn_tensor *q, *s, *g, *ref;
	float gs;

	ck_assert_msg(f != NULL, "%s", e.msg);
	q = lynn_st_find(f, "weight_packed");
	s = lynn_st_find(f, "weight_scale");
	g = lynn_st_find(f, "weight_global_scale");
	ref = lynn_st_find(f, "dequant_ct");
	ck_assert(q && s && g && ref);
	ck_assert_int_eq(q->dtype, LYNN_DTYPE_U8);
	ck_assert_int_eq(s->dtype, LYNN_DTYPE_F8_E4M3);
	ck_assert_int_eq(lynn_convert_to_f32(g->dtype, g->data, &gs, 1, &e), 0);
	for (int64_t r = 0; r < q->shape[0]; r++)
		for (int64_t c = 0; c < 2 * q->shape[1]; c++) {
			uint8_t byte = ((const uint8_t *)q->data)[r * q->shape[1] + c / 2];
			uint8_t nib = c % 2 ? byte >> 4 : byte & 15;
			uint8_t sc = ((const uint8_t *)s->data)[r * s->shape[1] + c / 16];
			float v = e2m1[nib & 7] * (nib & 8 ? -1.0f : 1.0f);
			float got = v * lynn_e4m3_to_f32(sc) / gs, want;
			memcpy(&want, (const uint8_t *)ref->data + 4 * (r * 2 * q->shape[1] + c), 4);
			ck_assert_msg(fabsf(got - want) <= TOL_NVFP4_REL * fabsf(want),
				      "[%lld,%lld] %g vs torch %g", (long long)r, (long long)c, got,
				      want);
		}
	lynn_st_close(f);
}
END_TEST

START_TEST(test_convert_to_f32)
{
	const uint16_t bf[3] = { 0x3F80, 0xC000, 0x7F80 };
	const int32_t i32[3] = { -5, 0, 123456 };
	const uint8_t e5m2[2] = { 0x3C, 0xC0 }; /* 1.0, -2.0 */
	const double f64[2] = { 0.1, -3.5 };
	float out[3];
	struct lynn_err e;
	ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_BF16, bf, out, 3, &e), 0);
	ck_assert(out[0] == 1.0f && out[1] == -2.0f && isinf(out[2]));
	ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_I32, i32, out, 3, &e), 0);
	ck_assert(out[0] == -5.0f && out[2] == 123456.0f);
	ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_F8_E5M2, e5m2, out, 2, &e), 0);
	ck_assert(out[0] == 1.0f && out[1] == -2.0f);
	ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_F64, f64, out, 2, &e), 0);
	ck_assert(out[0] == 0.1f && out[1] == -3.5f);
	ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_COUNT, f64, out, 1, &e), -LYNN_EINVAL);
}
END_TEST

/* ===== reading the HF fixtures ===== */

/* bf16 fixture -> f32 equals the f32 fixture (same bf16-rounded weights),
 * including fused 3-D experts against per-expert tensors. */
START_TEST(test_read_fixtures_agree)
{
	struct lynn_err e;
	struct lynn_ckpt *bf = lynn_ckpt_open(TINY, &e), *f32 = NULL;
	int64_t n_checked = 0;

	ck_assert_msg(bf != NULL, "%s", e.msg);
	f32 = lynn_ckpt_open(TINY_MM_F32, &e);
	ck_assert_msg(f32 != NULL, "%s", e.msg);
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(f32); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(f32, i), *b;
		const float *fv = t->data;
		float *conv;
		char name[256];
		int64_t offset = 0;
		int layer, ex;
		char proj[16];
		ck_assert_int_eq(t->dtype, LYNN_DTYPE_F32);
		b = lynn_ckpt_find(bf, t->name);
		if (!b && sscanf(t->name, "model.language_model.layers.%d.mlp.experts.%d.%15[a-z]_proj",
				 &layer, &ex, proj) == 3) {
			/* fused: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I] */
			bool down = !strcmp(proj, "down");
			snprintf(name, sizeof name, "model.language_model.layers.%d.mlp.experts.%s",
				 layer, down ? "down_proj" : "gate_up_proj");
			b = lynn_ckpt_find(bf, name);
			ck_assert_ptr_nonnull(b);
			ck_assert_int_eq(b->n_dims, 3);
			offset = ex * b->shape[1] * b->shape[2] +
				 (!strcmp(proj, "up") ? t->n_elems : 0);
		}
		ck_assert_msg(b != NULL, "no bf16 twin of '%s'", t->name);
		ck_assert_int_eq(b->dtype, LYNN_DTYPE_BF16);
		conv = malloc((size_t)t->n_elems * 4);
		ck_assert_int_eq(lynn_convert_to_f32(LYNN_DTYPE_BF16,
						     (const uint16_t *)b->data + offset, conv,
						     (size_t)t->n_elems, &e), 0);
		for (int64_t k = 0; k < t->n_elems; k++) {
			ck_assert_msg(fbits(conv[k]) == fbits(fv[k]), "'%s'[%lld]", t->name,
				      (long long)k);
			ck_assert_uint_eq(lynn_f32_to_bf16(fv[k]),
					  ((const uint16_t *)b->data)[offset + k]);
		}
		free(conv);
		n_checked++;
	}
	ck_assert_int_eq(n_checked, 178);
	lynn_ckpt_close(bf);
	lynn_ckpt_close(f32);
}
END_TEST

START_TEST(test_find_decoder)
{
	struct lynn_err e;
	const char *dirs[] = { TINY, TINY_TEXT_F32 };
	for (int d = 0; d < 2; d++) {
		struct lynn_ckpt *c = lynn_ckpt_open(dirs[d], &e);
		const struct lynn_tensor *t;
		ck_assert_msg(c != NULL, "%s", e.msg);
		t = lynn_ckpt_find_decoder(c, "embed_tokens.weight");
		ck_assert_ptr_nonnull(t);
		ck_assert_int_eq(t->shape[0], 513);
		ck_assert_str_eq(t->name, d ? "model.embed_tokens.weight"
					    : "model.language_model.embed_tokens.weight");
		t = lynn_ckpt_find_decoder(c, "lm_head.weight");
		ck_assert_ptr_nonnull(t);
		ck_assert_str_eq(t->name, "lm_head.weight");
		ck_assert_ptr_nonnull(lynn_ckpt_find_decoder(c, "layers.3.mlp.gate.weight"));
		ck_assert_ptr_nonnull(lynn_ckpt_find_decoder(c, "norm.weight"));
		ck_assert_ptr_null(lynn_ckpt_find_decoder(c, "layers.4.mlp.gate.weight"));
		ck_assert_ptr_null(lynn_ckpt_find(c, "nope"));
		lynn_ckpt_close(c);
	}
}
END_TEST

/* ===== the writer reproduces Hugging Face's files byte for byte ===== */

static void rewrite_file(const char *src, const char *out_dir, uint64_t max_shard)
{
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open(src, &e);
	struct lynn_st_writer *w;

	ck_assert_msg(f != NULL, "%s", e.msg);
	w = lynn_st_writer_create(out_dir, max_shard, &e);
	ck_assert_ptr_nonnull(w);
	for (int i = 0; i < lynn_st_n_metadata(f); i++) {
		const char *k, *v;
		lynn_st_metadata_at(f, i, &k, &v);
		ck_assert_int_eq(lynn_st_writer_set_metadata(w, k, v, &e), 0);
	}
	for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(f, i);
		ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, &e),
				 0);
	}
	/* stream in odd-sized pieces that straddle tensors */
	for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(f, i);
		const uint8_t *p = t->data;
		uint64_t left = t->nbytes;
		while (left) {
			size_t k = left < 777 ? (size_t)left : 777;
			ck_assert_int_eq(lynn_st_writer_write(w, p, k, &e), 0);
			p += k;
			left -= k;
		}
	}
	ck_assert_msg(lynn_st_writer_finish(w, &e) == 0, "%s", e.msg);
	lynn_st_writer_free(w);
	lynn_st_close(f);
}

static void assert_same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *x = tu_read(a, &la), *y = tu_read(b, &lb);
	ck_assert_ptr_nonnull(x);
	ck_assert_ptr_nonnull(y);
	ck_assert_msg(la == lb && !memcmp(x, y, la), "'%s' differs from '%s'", a, b);
	free(x);
	free(y);
}

START_TEST(test_writer_matches_hf_single)
{
	const char *srcs[] = { TINY, TINY_MM_F32, TINY_TEXT_BF16 };
	for (int i = 0; i < 3; i++) {
		char *dir = tu_mkdtemp(), *src = lynn_path_join(srcs[i], "model.safetensors");
		char *out = lynn_path_join(dir, "model.safetensors");
		rewrite_file(src, dir, 0);
		assert_same_file(out, src);
		free(out);
		free(src);
		lynn_rm_rf(dir);
		free(dir);
	}
}
END_TEST

/* Each HF shard rewritten alone is byte-identical. The whole model written
 * with a limit reads back with the same tensors, and its index has HF's
 * total_size. (HF's own cuts cannot be replayed from the files: they follow
 * module order and count a per-expert view as its whole fused storage.) */
START_TEST(test_writer_matches_hf_sharded)
{
	struct lynn_err e;
	struct lynn_ckpt *c = lynn_ckpt_open(TINY_TEXT_F32, &e), *c2;
	char *dir = tu_mkdtemp();
	struct lynn_st_writer *w;
	cJSON *mine, *theirs;
	char *p;

	ck_assert_msg(c != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_ckpt_n_files(c), 6);
	for (int i = 0; i < 6; i++) {
		char *sub = lynn_path_join(dir, "one"), *out = lynn_path_join(sub, "model.safetensors");
		rewrite_file(lynn_ckpt_file(c, i), sub, 0);
		assert_same_file(out, lynn_ckpt_file(c, i));
		lynn_rm_rf(sub);
		free(sub);
		free(out);
	}
	w = lynn_st_writer_create(dir, 300000, &e);
	ck_assert_int_eq(lynn_st_writer_set_metadata(w, "format", "pt", &e), 0);
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, &e),
				 0);
	}
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes, &e), 0);
	}
	ck_assert_msg(lynn_st_writer_finish(w, &e) == 0, "%s", e.msg);
	lynn_st_writer_free(w);
	p = lynn_path_join(dir, "model.safetensors.index.json");
	mine = lynn_json_load(p, 1 << 20, &e);
	free(p);
	theirs = lynn_json_load(TINY_TEXT_F32 "/model.safetensors.index.json", 1 << 20, &e);
	ck_assert(mine && theirs);
	ck_assert_double_eq(
		cJSON_GetObjectItem(cJSON_GetObjectItem(mine, "metadata"), "total_size")->valuedouble,
		cJSON_GetObjectItem(cJSON_GetObjectItem(theirs, "metadata"), "total_size")->valuedouble);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(mine, "weight_map")),
			 cJSON_GetArraySize(cJSON_GetObjectItem(theirs, "weight_map")));
	cJSON_Delete(mine);
	cJSON_Delete(theirs);
	c2 = lynn_ckpt_open(dir, &e);
	ck_assert_msg(c2 != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_ckpt_n_tensors(c2), lynn_ckpt_n_tensors(c));
	ck_assert_int_gt(lynn_ckpt_n_files(c2), 1);
	for (int i = 0; i < lynn_ckpt_n_files(c2); i++) {
		char want[64];
		const struct lynn_st_file *f = lynn_ckpt_st(c2, i);
		snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", i + 1,
			 lynn_ckpt_n_files(c2));
		ck_assert_str_eq(strrchr(lynn_st_path(f), '/') + 1, want);
		ck_assert_uint_le(lynn_st_file_size(f) - lynn_st_header_size(f), 300000);
	}
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i), *u = lynn_ckpt_find(c2, t->name);
		ck_assert_ptr_nonnull(u);
		ck_assert_uint_eq(u->nbytes, t->nbytes);
		ck_assert(!memcmp(u->data, t->data, t->nbytes));
	}
	lynn_ckpt_close(c2);
	lynn_ckpt_close(c);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* The cut rule on its own: in declaration order, a new shard when the next
 * tensor would pass the limit; one over the limit stands alone. */
START_TEST(test_writer_shard_rule)
{
	static const int64_t sizes[] = { 100, 100, 100, 250, 50, 400, 10 };
	static const int want_shard[] = { 1, 1, 1, 2, 2, 3, 4 };
	struct lynn_err e;
	char *dir = tu_mkdtemp();
	struct lynn_st_writer *w = lynn_st_writer_create(dir, 300, &e);
	struct lynn_ckpt *c;
	static uint8_t zero[400];

	for (int i = 0; i < 7; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		ck_assert_int_eq(lynn_st_writer_declare(w, name, LYNN_DTYPE_U8, 1, &sizes[i], &e), 0);
	}
	for (int i = 0; i < 7; i++)
		ck_assert_int_eq(lynn_st_writer_write(w, zero, (size_t)sizes[i], &e), 0);
	ck_assert_int_eq(lynn_st_writer_finish(w, &e), 0);
	lynn_st_writer_free(w);
	c = lynn_ckpt_open(dir, &e);
	ck_assert_msg(c != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_ckpt_n_files(c), 4);
	for (int i = 0; i < 7; i++) {
		char name[16], want[64];
		snprintf(name, sizeof name, "t%d", i);
		snprintf(want, sizeof want, "/model-%05d-of-00004.safetensors", want_shard[i]);
		ck_assert_ptr_nonnull(strstr(lynn_ckpt_find(c, name)->file, want));
	}
	lynn_ckpt_close(c);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_writer_errors)
{
	struct lynn_err e;
	char *dir = tu_mkdtemp(), *p;
	int64_t sh[2] = { 2, 2 }, big[1] = { 10 };
	uint8_t buf[64] = { 0 };
	struct lynn_st_writer *w = lynn_st_writer_create(dir, 16, &e);

	ck_assert_int_eq(lynn_st_writer_declare(w, "a", LYNN_DTYPE_F32, 2, sh, &e), 0);
	ck_assert_int_eq(lynn_st_writer_declare(w, "a", LYNN_DTYPE_F32, 2, sh, &e), -LYNN_EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "'a'"));
	ck_assert_int_eq(lynn_st_writer_declare(w, "__metadata__", LYNN_DTYPE_F32, 2, sh, &e),
			 -LYNN_EINVAL);
	ck_assert_int_eq(lynn_st_writer_declare(w, "b", LYNN_DTYPE_U8, 1, big, &e), 0);
	ck_assert_int_eq(lynn_st_writer_write(w, buf, 20, &e), 0);
	/* declaring after writing began is refused */
	ck_assert_int_eq(lynn_st_writer_declare(w, "c", LYNN_DTYPE_U8, 1, big, &e), -LYNN_EINVAL);
	/* short: b got 4 of 10 bytes */
	ck_assert_int_eq(lynn_st_writer_finish(w, &e), -LYNN_EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "'b'"));
	lynn_st_writer_free(w);
	/* the unfinished writer left nothing behind */
	ck_assert(!lynn_dir_nonempty(dir));

	w = lynn_st_writer_create(dir, 0, &e);
	ck_assert_int_eq(lynn_st_writer_declare(w, "a", LYNN_DTYPE_U8, 1, big, &e), 0);
	ck_assert_int_eq(lynn_st_writer_write(w, buf, 11, &e), -LYNN_EINVAL);
	lynn_st_writer_free(w);
	ck_assert(!lynn_dir_nonempty(dir));

	/* an empty checkpoint, a zero-size tensor and a scalar are valid */
	w = lynn_st_writer_create(dir, 0, &e);
	{
		int64_t zero[2] = { 0, 5 };
		ck_assert_int_eq(lynn_st_writer_declare(w, "z", LYNN_DTYPE_F32, 2, zero, &e), 0);
		ck_assert_int_eq(lynn_st_writer_declare(w, "s", LYNN_DTYPE_F64, 0, NULL, &e), 0);
		ck_assert_int_eq(lynn_st_writer_write(w, buf, 8, &e), 0);
		ck_assert_int_eq(lynn_st_writer_finish(w, &e), 0);
	}
	lynn_st_writer_free(w);
	p = lynn_path_join(dir, "model.safetensors");
	{
		struct lynn_st_file *f = lynn_st_open(p, &e);
		ck_assert_msg(f != NULL, "%s", e.msg);
		ck_assert_int_eq(lynn_st_n_tensors(f), 2);
		ck_assert_int_eq(lynn_st_find(f, "s")->n_dims, 0);
		ck_assert_int_eq(lynn_st_find(f, "s")->n_elems, 1);
		ck_assert_int_eq(lynn_st_find(f, "z")->n_elems, 0);
		ck_assert_uint_eq(lynn_st_header_size(f) % 8, 0);
		lynn_st_close(f);
	}
	free(p);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* ===== broken files ===== */

struct broken {
	const char *what;
	const char *header;  /* NULL: raw bytes below */
	uint64_t data_len;   /* bytes of data after the header */
	long long hdr_len;   /* >= 0: lie about the header length */
	long long cut;       /* >= 0: truncate the file to this many bytes */
	const char *raw;     /* raw file bytes (with raw_len) */
	size_t raw_len;
	const char *expect;  /* in the message, besides the file name */
};

#define T2 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static const struct broken broken_files[] = {
	{ "empty file", NULL, 0, -1, -1, "", 0, "too small" },
	{ "5 bytes", NULL, 0, -1, -1, "\x05\0\0\0\0", 5, "too small" },
	{ "header over the limit", "{}", 0, 100000001, -1, NULL, 0, "exceeds the limit" },
	{ "huge header length", "{}", 0, 0x7fffffffffffffffLL, -1, NULL, 0, "exceeds the limit" },
	{ "lying header length", "{" T2 "}", 8, 1000, -1, NULL, 0, "runs past the end" },
	{ "truncated in the header", "{" T2 "}", 8, -1, 30, NULL, 0, "runs past the end" },
	{ "truncated in the data", "{" T2 "}", 8, -1, 8 + 53 + 5, NULL, 0, "'a'" },
	{ "truncated by one byte", "{" T2 "}", 8, -1, 8 + 53 + 7, NULL, 0, "truncated" },
	{ "not JSON", "{not json}", 0, -1, -1, NULL, 0, "not valid JSON" },
	{ "JSON array", "[1, 2]", 0, -1, -1, NULL, 0, "not a JSON object" },
	{ "data after the JSON", "{}{}", 0, -1, -1, NULL, 0, "after the JSON" },
	{ "control byte", "{\x01}", 0, -1, -1, NULL, 0, "control byte" },
	{ "non-UTF-8 name", "{\"\xff\":{}}", 0, -1, -1, NULL, 0, "UTF-8" },
	{ "overlong UTF-8", "{\"\xc0\xaf\":{}}", 0, -1, -1, NULL, 0, "UTF-8" },
	{ "UTF-8 surrogate", "{\"\xed\xa0\x80\":{}}", 0, -1, -1, NULL, 0, "UTF-8" },
	{ "wrong dtype name",
	  "{\"a\":{\"dtype\":\"BF17\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -1, -1, NULL, 0,
	  "unknown dtype 'BF17'" },
	{ "dtype lynn does not read",
	  "{\"a\":{\"dtype\":\"F8_E8M0\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, -1, -1,
	  NULL, 0, "'F8_E8M0' is not supported" },
	{ "lower-case dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
	  4, -1, -1, NULL, 0, "unknown dtype" },
	{ "shape/size mismatch",
	  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20, -1, -1, NULL,
	  0, "needs 24 bytes" },
	{ "overlapping offsets",
	  "{" T2 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, -1, -1,
	  NULL, 0, "overlap" },
	{ "gap between tensors",
	  "{" T2 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, -1, -1,
	  NULL, 0, "gap" },
	{ "gap at the start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
	  12, -1, -1, NULL, 0, "gap" },
	{ "trailing bytes", "{" T2 "}", 12, -1, -1, NULL, 0, "4 trailing bytes" },
	{ "trailing bytes, no tensors", "{}", 3, -1, -1, NULL, 0, "trailing bytes" },
	{ "dims overflow",
	  "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
	  -1, -1, NULL, 0, "overflow" },
	{ "bytes overflow",
	  "{\"a\":{\"dtype\":\"F64\",\"shape\":[4503599627370496,512],\"data_offsets\":[0,0]}}",
	  0, -1, -1, NULL, 0, "overflow" },
	{ "dim above 2^53", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,0]}}",
	  0, -1, -1, NULL, 0, "2^53" },
	{ "negative dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, -1,
	  -1, NULL, 0, "non-negative" },
	{ "fractional dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1,
	  -1, -1, NULL, 0, "integer" },
	{ "duplicate names", "{" T2 "," T2 "}", 8, -1, -1, NULL, 0, "appears twice" },
	{ "missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, -1, -1, NULL, 0,
	  "missing field 'data_offsets'" },
	{ "end before begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
	  -1, -1, NULL, 0, "end before begin" },
	{ "three offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
	  -1, -1, NULL, 0, "data_offsets" },
	{ "shape not an array", "{\"a\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,3]}}", 3,
	  -1, -1, NULL, 0, "shape" },
	{ "entry not an object", "{\"a\":5}", 0, -1, -1, NULL, 0, "not an object" },
	{ "metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, -1, -1, NULL, 0,
	  "'__metadata__' key 'format'" },
	{ "metadata not an object", "{\"__metadata__\":[]}", 0, -1, -1, NULL, 0, "__metadata__" },
	{ "too many dims",
	  "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, -1,
	  -1, NULL, 0, "dimensions" },
};

/* Write case i into dir/bad.safetensors; returns the path (caller frees). */
static char *write_broken(const char *dir, const struct broken *b)
{
	char *path = lynn_path_join(dir, "bad.safetensors");
	uint8_t *buf;
	size_t len;

	if (!b->header) {
		tu_write(path, b->raw, b->raw_len);
		return path;
	}
	{
		size_t hl = strlen(b->header);
		uint64_t n = b->hdr_len >= 0 ? (uint64_t)b->hdr_len : hl;
		len = 8 + hl + b->data_len;
		buf = calloc(1, len);
		for (int i = 0; i < 8; i++)
			buf[i] = (uint8_t)(n >> (8 * i));
		memcpy(buf + 8, b->header, hl);
		if (b->cut >= 0 && (size_t)b->cut < len)
			len = (size_t)b->cut;
		tu_write(path, buf, len);
		free(buf);
	}
	return path;
}

START_TEST(test_broken_files)
{
	const struct broken *b = &broken_files[_i];
	char *dir = tu_mkdtemp(), *path = write_broken(dir, b);
	struct lynn_err e = { 0 };
	struct lynn_st_file *f = lynn_st_open(path, &e);
	struct lynn_ckpt *c;
	char *args;

	ck_assert_msg(f == NULL, "%s: opened", b->what);
	ck_assert_msg(e.code == -LYNN_EFORMAT || e.code == -LYNN_EUNSUPPORTED, "%s: code %d",
		      b->what, e.code);
	ck_assert_msg(strstr(e.msg, path) != NULL, "%s: '%s' lacks the file", b->what, e.msg);
	ck_assert_msg(strstr(e.msg, b->expect) != NULL, "%s: '%s' lacks '%s'", b->what, e.msg,
		      b->expect);
	/* through a folder too */
	c = lynn_ckpt_open(dir, &e);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(e.msg, "bad.safetensors"));
	/* the CLI: exit 2, the file named, no crash */
	ck_assert(asprintf(&args, "inspect '%s'", path) > 0);
	{
		struct tu_run r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 2, "%s: exit %d", b->what, r.status);
		ck_assert_msg(strstr(r.err, path) != NULL, "%s: stderr '%s'", b->what, r.err);
		ck_assert_str_eq(r.out, "");
		tu_run_free(&r);
	}
	free(args);
	free(path);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* The same rules on a buffer in memory (the fuzzer's entry point). */
START_TEST(test_open_mem)
{
	static const char good[] = "\x08\0\0\0\0\0\0\0{}      ";
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open_mem(good, 16, "mem", &e);
	ck_assert_msg(f != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_st_n_tensors(f), 0);
	lynn_st_close(f);
	ck_assert_ptr_null(lynn_st_open_mem(good, 15, "mem", &e));
	ck_assert_ptr_nonnull(strstr(e.msg, "'mem'"));
}
END_TEST

/* ===== index and shards ===== */

/* A tiny valid shard holding tensors named in `names` (U8 [1] each). */
static void write_shard(const char *dir, const char *file, const char *const *names, int n)
{
	struct lynn_err e;
	char *tmp = lynn_path_join(dir, ".w"), *src, *dst;
	struct lynn_st_writer *w = lynn_st_writer_create(tmp, 0, &e);
	int64_t one = 1;
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(lynn_st_writer_declare(w, names[i], LYNN_DTYPE_U8, 1, &one, &e), 0);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(lynn_st_writer_write(w, "x", 1, &e), 0);
	ck_assert_int_eq(lynn_st_writer_finish(w, &e), 0);
	lynn_st_writer_free(w);
	src = lynn_path_join(tmp, "model.safetensors");
	dst = lynn_path_join(dir, file);
	ck_assert_int_eq(rename(src, dst), 0);
	lynn_rm_rf(tmp);
	free(tmp);
	free(src);
	free(dst);
}

struct bad_index {
	const char *what;
	const char *index;
	const char *expect;
};

static const struct bad_index bad_indexes[] = {
	{ "missing shard",
	  "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"c\":\"s3.safetensors\"}}",
	  "'s3.safetensors', which is missing" },
	{ "missing tensor",
	  "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"z\":\"s1.safetensors\"}}",
	  "'z' is mapped to 's1.safetensors' but no shard has it" },
	{ "tensor mapped to the wrong shard",
	  "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s2.safetensors\"}}", "'a' is mapped to" },
	{ "key twice", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
	  "twice" },
	{ "no weight_map", "{\"metadata\":{}}", "weight_map" },
	{ "empty weight_map", "{\"weight_map\":{}}", "empty" },
	{ "shard outside the folder", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}",
	  "not a file in the folder" },
	{ "shard name not a string", "{\"weight_map\":{\"a\":1}}", "'a'" },
	{ "index not JSON", "{\"weight_map\":", "model.safetensors.index.json" },
};

START_TEST(test_bad_index)
{
	const struct bad_index *b = &bad_indexes[_i];
	static const char *const s1[] = { "a" }, *const s2[] = { "b" };
	char *dir = tu_mkdtemp(), *ip = lynn_path_join(dir, "model.safetensors.index.json");
	struct lynn_err e = { 0 };
	struct lynn_ckpt *c;
	char *args;

	write_shard(dir, "s1.safetensors", s1, 1);
	write_shard(dir, "s2.safetensors", s2, 1);
	tu_write(ip, b->index, strlen(b->index));
	c = lynn_ckpt_open(dir, &e);
	ck_assert_msg(c == NULL, "%s: opened", b->what);
	ck_assert_msg(strstr(e.msg, "model.safetensors.index.json") != NULL, "%s: '%s'", b->what,
		      e.msg);
	ck_assert_msg(strstr(e.msg, b->expect) != NULL, "%s: '%s' lacks '%s'", b->what, e.msg,
		      b->expect);
	ck_assert(asprintf(&args, "inspect '%s'", dir) > 0);
	{
		struct tu_run r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 2, "%s: exit %d", b->what, r.status);
		ck_assert_ptr_nonnull(strstr(r.err, "model.safetensors.index.json"));
		tu_run_free(&r);
	}
	free(args);
	free(ip);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_shard_tensor_not_in_index)
{
	static const char *const s1[] = { "a", "x" }, *const s2[] = { "b" };
	char *dir = tu_mkdtemp(), *ip = lynn_path_join(dir, "model.safetensors.index.json");
	const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
	struct lynn_err e;

	write_shard(dir, "s1.safetensors", s1, 2);
	write_shard(dir, "s2.safetensors", s2, 1);
	tu_write(ip, idx, strlen(idx));
	ck_assert_ptr_null(lynn_ckpt_open(dir, &e));
	ck_assert_ptr_nonnull(strstr(e.msg, "model.safetensors.index.json"));
	ck_assert_ptr_nonnull(strstr(e.msg, "tensor 'x' of shard"));
	ck_assert_ptr_nonnull(strstr(e.msg, "s1.safetensors"));
	ck_assert_ptr_nonnull(strstr(e.msg, "is not in the index"));
	free(ip);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_tensor_in_two_shards)
{
	static const char *const s1[] = { "a", "b" }, *const s2[] = { "b" };
	char *dir = tu_mkdtemp(), *ip = lynn_path_join(dir, "model.safetensors.index.json");
	const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
	struct lynn_err e;

	write_shard(dir, "s1.safetensors", s1, 2);
	write_shard(dir, "s2.safetensors", s2, 1);
	tu_write(ip, idx, strlen(idx));
	ck_assert_ptr_null(lynn_ckpt_open(dir, &e));
	ck_assert_ptr_nonnull(strstr(e.msg, "'b' is in both"));
	ck_assert_ptr_nonnull(strstr(e.msg, "s1.safetensors"));
	/* without an index: every *.safetensors, names unique across files */
	unlink(ip);
	ck_assert_ptr_null(lynn_ckpt_open(dir, &e));
	ck_assert_ptr_nonnull(strstr(e.msg, "'b' is in both"));
	free(ip);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_bad_shard_named)
{
	static const char *const s1[] = { "a" };
	char *dir = tu_mkdtemp(), *ip = lynn_path_join(dir, "model.safetensors.index.json");
	char *s2 = lynn_path_join(dir, "s2.safetensors");
	const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
	struct lynn_err e;

	write_shard(dir, "s1.safetensors", s1, 1);
	tu_write(s2, "\x02\0\0\0\0\0\0\0{", 10);
	tu_write(ip, idx, strlen(idx));
	ck_assert_ptr_null(lynn_ckpt_open(dir, &e));
	ck_assert_ptr_nonnull(strstr(e.msg, s2));
	ck_assert_ptr_null(lynn_ckpt_open("/nonexistent/lynn", &e));
	ck_assert_int_eq(e.code, -LYNN_ENOTFOUND);
	free(ip);
	free(s2);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* ===== config ===== */

START_TEST(test_config_fixtures)
{
	const char *dirs[] = { TINY, TINY_MM_F32, TINY_TEXT_F32, TINY_TEXT_BF16 };
	for (int d = 0; d < 4; d++) {
		struct lynn_config g;
		struct lynn_err e;
		ck_assert_msg(lynn_config_load(&g, dirs[d], &e) == 0, "%s", e.msg);
		/* tests/fixtures/README.md: vocab 513, hidden 64, 4 layers [linear,
		 * full, linear, full], 4 q / 2 kv heads of 32 (rot dim 8, theta
		 * 1e7), DeltaNet 2 k / 4 v heads of 16, conv 4, 8 experts top-2
		 * (moe 32, shared 32); generation_config eos [im_end, endoftext] */
		ck_assert_int_eq(g.multimodal, d < 2);
		ck_assert_int_eq(g.has_vision_config, d < 2);
		ck_assert_str_eq(g.model_type, d < 2 ? "qwen3_5_moe" : "qwen3_5_moe_text");
		ck_assert_int_eq(g.vocab_size, 513);
		ck_assert_int_eq(g.hidden_size, 64);
		ck_assert_int_eq(g.n_layers, 4);
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(g.layer_types[i], i % 2 ? LYNN_LAYER_FULL : LYNN_LAYER_LINEAR);
		ck_assert_int_eq(g.n_heads, 4);
		ck_assert_int_eq(g.n_kv_heads, 2);
		ck_assert_int_eq(g.head_dim, 32);
		ck_assert_int_eq(g.rot_dim, 8);
		ck_assert_double_eq(g.rope_theta, 1e7);
		ck_assert_int_eq(g.lin_n_k_heads, 2);
		ck_assert_int_eq(g.lin_n_v_heads, 4);
		ck_assert_int_eq(g.lin_k_dim, 16);
		ck_assert_int_eq(g.lin_v_dim, 16);
		ck_assert_int_eq(g.lin_conv_kernel, 4);
		ck_assert_int_eq(g.n_experts, 8);
		ck_assert_int_eq(g.n_experts_per_tok, 2);
		ck_assert_int_eq(g.moe_inter, 32);
		ck_assert_int_eq(g.shared_inter, 32);
		ck_assert_int_eq(g.n_eos, 2);
		ck_assert_int_eq(g.eos_ids[0], 482); /* <|im_end|> */
		ck_assert_int_eq(g.eos_ids[1], 480); /* <|endoftext|> */
		ck_assert_int_eq(g.pad_id, 480);
		ck_assert_int_eq(g.bos_id, -1);
		ck_assert(!g.tie_word_embeddings);
		ck_assert_double_eq_tol(g.rms_eps, 1e-6, 1e-12);
		/* generation_config.json's sampling: temperature 1.0, top_k 20, top_p 0.95 */
		ck_assert_double_eq(g.gen_temperature, 1.0);
		ck_assert_double_eq(g.gen_top_p, 0.95);
		ck_assert_int_eq(g.gen_top_k, 20);
		ck_assert(isnan(g.gen_min_p));
		lynn_config_release(&g);
	}
}
END_TEST

struct bad_config {
	const char *what, *json, *expect;
};

#define FLAT_HEAD \
	"{\"model_type\":\"qwen3_5_moe_text\",\"vocab_size\":10,\"hidden_size\":8," \
	"\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":8," \
	"\"linear_num_key_heads\":1,\"linear_num_value_heads\":2,\"linear_key_head_dim\":4," \
	"\"linear_value_head_dim\":4,\"num_experts\":4,\"moe_intermediate_size\":4," \
	"\"shared_expert_intermediate_size\":4,"
/* head_dim 8 x the default partial_rotary_factor 0.25: rotary dim 2 */
#define ROPE_OK "\"rope_parameters\":{\"mrope_section\":[1,0,0]},"

static const struct bad_config bad_configs[] = {
	{ "no model_type", "{}", "'model_type'" },
	{ "other model", "{\"model_type\":\"llama\"}", "'llama' is not supported" },
	{ "wrapper without text_config", "{\"model_type\":\"qwen3_5_moe\"}", "'text_config'" },
	{ "missing hidden_size", "{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"vocab_size\":5}}",
	  "'hidden_size'" },
	{ "zero layers", FLAT_HEAD ROPE_OK "\"num_hidden_layers\":0,\"num_experts_per_tok\":2}",
	  "'num_hidden_layers'" },
	{ "string layers", FLAT_HEAD ROPE_OK "\"num_hidden_layers\":\"4\",\"num_experts_per_tok\":2}",
	  "'num_hidden_layers'" },
	{ "top-k above experts", FLAT_HEAD ROPE_OK "\"num_hidden_layers\":2,\"num_experts_per_tok\":5}",
	  "'num_experts_per_tok'" },
	{ "layer_types length",
	  FLAT_HEAD ROPE_OK "\"num_hidden_layers\":2,\"num_experts_per_tok\":2,\"layer_types\":[\"full_attention\"]}",
	  "'layer_types'" },
	{ "layer_types value",
	  FLAT_HEAD ROPE_OK "\"num_hidden_layers\":1,\"num_experts_per_tok\":2,\"layer_types\":[\"mamba\"]}",
	  "'layer_types' entry 0" },
	{ "odd rotary dim",
	  FLAT_HEAD "\"num_hidden_layers\":1,\"num_experts_per_tok\":2,\"partial_rotary_factor\":0.125,"
		    "\"rope_parameters\":{\"mrope_section\":[1,0,0]}}",
	  "rotary dim 1" },
	{ "mrope sum",
	  FLAT_HEAD "\"num_hidden_layers\":1,\"num_experts_per_tok\":2,"
		    "\"rope_parameters\":{\"mrope_section\":[1,1,1]}}",
	  "'mrope_section'" },
	{ "eos not ids",
	  FLAT_HEAD "\"num_hidden_layers\":1,\"num_experts_per_tok\":2,"
		    "\"rope_parameters\":{\"mrope_section\":[1,0,0]},\"eos_token_id\":\"x\"}",
	  "'eos_token_id'" },
	{ "not JSON", "{\"model_type\":", "config.json" },
};

START_TEST(test_config_errors)
{
	const struct bad_config *b = &bad_configs[_i];
	char *dir = tu_mkdtemp(), *p = lynn_path_join(dir, "config.json");
	struct lynn_config g;
	struct lynn_err e = { 0 };

	tu_write(p, b->json, strlen(b->json));
	ck_assert_msg(lynn_config_load(&g, dir, &e) < 0, "%s: loaded", b->what);
	ck_assert_msg(strstr(e.msg, p) != NULL, "%s: '%s'", b->what, e.msg);
	ck_assert_msg(strstr(e.msg, b->expect) != NULL, "%s: '%s' lacks '%s'", b->what, e.msg,
		      b->expect);
	ck_assert_ptr_null(g.layer_types);
	free(p);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* full_attention_interval, top-level rope fields, eos from the config */
START_TEST(test_config_fallbacks)
{
	const char *js = FLAT_HEAD "\"num_hidden_layers\":8,\"num_experts_per_tok\":2,"
				   "\"full_attention_interval\":4,\"rope_theta\":5000.0,"
				   "\"partial_rotary_factor\":0.5,\"eos_token_id\":7,"
				   "\"rope_scaling\":{\"mrope_section\":[1,1,0]}}";
	char *dir = tu_mkdtemp(), *p = lynn_path_join(dir, "config.json");
	struct lynn_config g;
	struct lynn_err e;

	tu_write(p, js, strlen(js));
	ck_assert_msg(lynn_config_load(&g, p, &e) == 0, "%s", e.msg);
	for (int i = 0; i < 8; i++) /* full iff (i + 1) % 4 == 0 */
		ck_assert_int_eq(g.layer_types[i], (i == 3 || i == 7) ? LYNN_LAYER_FULL
								    : LYNN_LAYER_LINEAR);
	ck_assert_double_eq(g.rope_theta, 5000.0);
	ck_assert_int_eq(g.rot_dim, 4);
	ck_assert_int_eq(g.n_eos, 1);
	ck_assert_int_eq(g.eos_ids[0], 7);
	lynn_config_release(&g);
	free(p);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* generation_config.json's sampling fields: read when numbers, absent or
 * null left unset, another type or a fractional top_k refused naming the
 * file and the field */
START_TEST(test_config_generation)
{
	static const struct {
		const char *json, *expect; /* expect NULL: loads */
	} cases[] = {
		{ "{\"temperature\":0.7,\"top_p\":0.8,\"top_k\":20,\"min_p\":0.0}", NULL },
		{ "{\"temperature\":null,\"top_k\":null}", NULL },
		{ "{\"top_p\":\"high\"}", "'top_p'" },
		{ "{\"temperature\":[1]}", "'temperature'" },
		{ "{\"top_k\":2.5}", "'top_k'" },
		{ "{\"top_k\":-1}", "'top_k'" },
	};
	const char *js = FLAT_HEAD ROPE_OK "\"num_hidden_layers\":1,\"num_experts_per_tok\":2}";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *dir = tu_mkdtemp(), *p = lynn_path_join(dir, "config.json");
		char *gp = lynn_path_join(dir, "generation_config.json");
		struct lynn_config g;
		struct lynn_err e = { 0 };
		tu_write(p, js, strlen(js));
		tu_write(gp, cases[i].json, strlen(cases[i].json));
		int rc = lynn_config_load(&g, dir, &e);
		if (cases[i].expect) {
			ck_assert_msg(rc < 0 && strstr(e.msg, gp) && strstr(e.msg, cases[i].expect), "case %zu: %s",
				      i, e.msg);
		} else {
			ck_assert_msg(rc == 0, "case %zu: %s", i, e.msg);
			if (i == 0)
				ck_assert(g.gen_temperature == 0.7 && g.gen_top_p == 0.8 && g.gen_top_k == 20 &&
					  g.gen_min_p == 0.0);
			else
				ck_assert(isnan(g.gen_temperature) && isnan(g.gen_top_p) && g.gen_top_k == -1);
			lynn_config_release(&g);
		}
		free(p);
		free(gp);
		lynn_rm_rf(dir);
		free(dir);
	}
}
END_TEST

/* ===== lynn inspect ===== */

START_TEST(test_inspect_json)
{
	struct lynn_err e;
	cJSON *exp = lynn_json_load(FIXTURES "/inspect_expected.json", 1 << 20, &e), *x;
	int n = 0;

	ck_assert_msg(exp != NULL, "%s", e.msg);
	cJSON_ArrayForEach(x, exp) {
		static const char *const keys[] = { "n_tensors", "n_params", "n_params_active",
						    "n_params_active_text",
						    "n_params_routed_experts", "n_params_vision",
						    "total_bytes" };
		char *args;
		struct tu_run r;
		cJSON *got;
		ck_assert(asprintf(&args, "inspect --json --tensors '%s/%s'", FIXTURES, x->string) > 0);
		r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
		got = cJSON_Parse(r.out);
		ck_assert_ptr_nonnull(got);
		ck_assert_str_eq(cJSON_GetObjectItem(got, "format")->valuestring, "safetensors");
		ck_assert_str_eq(cJSON_GetObjectItem(got, "architecture")->valuestring,
				 cJSON_GetObjectItem(x, "architecture")->valuestring);
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
			ck_assert_msg(cJSON_GetObjectItem(got, keys[k])->valuedouble ==
					      cJSON_GetObjectItem(x, keys[k])->valuedouble,
				      "%s: %s", x->string, keys[k]);
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(got, "files")),
				 (int)cJSON_GetObjectItem(x, "n_files")->valuedouble);
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(got, "tensors")),
				 (int)cJSON_GetObjectItem(x, "n_tensors")->valuedouble);
		{
			cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(got, "tensors"), 0);
			ck_assert_ptr_nonnull(cJSON_GetObjectItem(t0, "name"));
			ck_assert_ptr_nonnull(cJSON_GetObjectItem(t0, "dtype"));
			ck_assert(cJSON_IsArray(cJSON_GetObjectItem(t0, "shape")));
			ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(t0, "file")->valuestring,
						     ".safetensors"));
		}
		ck_assert_str_eq(cJSON_GetObjectItem(got, "quantization")->valuestring,
				 strstr(x->string, "f32") ? "f32" : "bf16");
		cJSON_Delete(got);
		tu_run_free(&r);
		free(args);
		n++;
	}
	ck_assert_int_eq(n, 4);
	cJSON_Delete(exp);
}
END_TEST

START_TEST(test_inspect_text_and_usage)
{
	struct tu_run r = tu_lynn("inspect " TINY_TEXT_F32 "/model-00002-of-00006.safetensors", NULL,
				  NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "Qwen3_5MoeForCausalLM")); /* config beside it */
	ck_assert_ptr_nonnull(strstr(r.out, "model-00002-of-00006.safetensors"));
	tu_run_free(&r);
	r = tu_lynn("inspect --tensors " TINY, NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "model.language_model.layers.0.mlp.experts.gate_up_proj"));
	ck_assert_ptr_nonnull(strstr(r.out, "[8, 64, 64]"));
	ck_assert_ptr_nonnull(strstr(r.out, "1 linear_attention") == NULL ? strstr(r.out, "2 linear_attention") : NULL);
	tu_run_free(&r);
	r = tu_lynn("inspect", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("inspect --bogus " TINY, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("inspect /nonexistent/model", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "/nonexistent/model"));
	tu_run_free(&r);
	r = tu_lynn("inspect --help", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "usage: lynn inspect"));
	tu_run_free(&r);
}
END_TEST

START_TEST(test_inspect_gguf_and_config)
{
	char *dir = tu_mkdtemp(), *g = lynn_path_join(dir, "m.gguf"), *args;
	char *cfg = lynn_path_join(dir, "config.json"), *st = lynn_path_join(dir, "model.safetensors");
	struct tu_run r;

	/* a broken .gguf: exit 2, the file named */
	tu_write(g, "GGUF", 4);
	ck_assert(asprintf(&args, "inspect '%s'", g) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, g));
	tu_run_free(&r);
	free(args);
	/* a valid file with a broken config.json beside it: the field is named */
	tu_write(st, "\x08\0\0\0\0\0\0\0{}      ", 16);
	{ const char *j1 = "{\"model_type\":\"qwen3_5_moe_text\"}"; tu_write(cfg, j1, strlen(j1)); }
	ck_assert(asprintf(&args, "inspect '%s'", dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "'vocab_size'"));
	tu_run_free(&r);
	/* another architecture: described without the MoE figures */
	{ const char *j2 = "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"]}"; tu_write(cfg, j2, strlen(j2)); }
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "LlamaForCausalLM"));
	tu_run_free(&r);
	free(args);
	free(g);
	free(cfg);
	free(st);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* A GGUF written by llama.cpp's gguf-py; figures read back by its
 * GGUFReader (tests/tools/gen_gguf_fixture.py). */
START_TEST(test_inspect_gguf)
{
	struct lynn_err e;
	cJSON *exp = lynn_json_load(FIXTURES "/inspect_gguf_expected.json", 1 << 20, &e), *got, *x;
	struct tu_run r = tu_lynn("inspect --json --tensors " FIXTURES "/inspect_tiny.gguf", NULL, NULL);
	static const char *const keys[] = { "n_tensors", "n_params", "n_params_active",
					    "n_params_routed_experts" };

	ck_assert_ptr_nonnull(exp);
	ck_assert_msg(r.status == 0, "%s", r.err);
	got = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(cJSON_GetObjectItem(got, "format")->valuestring, "gguf");
	ck_assert_str_eq(cJSON_GetObjectItem(got, "architecture")->valuestring,
			 cJSON_GetObjectItem(exp, "architecture")->valuestring);
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
		ck_assert_msg(cJSON_GetObjectItem(got, keys[k])->valuedouble ==
				      cJSON_GetObjectItem(exp, keys[k])->valuedouble,
			      "%s", keys[k]);
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(exp, "tensor_types")) {
		cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(got, "dtypes"), x->string);
		ck_assert_msg(d != NULL, "type %s", x->string);
		ck_assert_int_eq(cJSON_GetObjectItem(d, "tensors")->valueint, x->valueint);
	}
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(got, "tensors")),
			 cJSON_GetObjectItem(exp, "n_tensors")->valueint);
	ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(got, "quantization")->valuestring, "Q8_0"));
	cJSON_Delete(got);
	cJSON_Delete(exp);
	tu_run_free(&r);
	r = tu_lynn("inspect --tensors " FIXTURES "/inspect_tiny.gguf", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "blk.0.ffn_gate_exps.weight"));
	ck_assert_ptr_nonnull(strstr(r.out, "[4, 32, 32]")); /* PyTorch order */
	tu_run_free(&r);
}
END_TEST

/* quantized checkpoints: packed nibbles count twice, scales not at all */
START_TEST(test_quant_detection)
{
	struct lynn_err e;
	char *dir = tu_mkdtemp();
	struct lynn_st_writer *w = lynn_st_writer_create(dir, 0, &e);
	static const struct {
		const char *name;
		enum lynn_dtype dt;
		int nd;
		int64_t shape[2];
	} ts[] = {
		{ "a.weight_packed", LYNN_DTYPE_U8, 2, { 4, 8 } },
		{ "a.weight_scale", LYNN_DTYPE_F8_E4M3, 2, { 4, 1 } },
		{ "a.weight_global_scale", LYNN_DTYPE_F32, 1, { 1 } },
		{ "a.input_global_scale", LYNN_DTYPE_F32, 1, { 1 } },
		{ "b.weight", LYNN_DTYPE_U8, 2, { 4, 8 } },
		{ "b.weight_scale", LYNN_DTYPE_F8_E4M3, 2, { 4, 1 } },
		{ "b.weight_scale_2", LYNN_DTYPE_F32, 0, { 0 } },
		{ "b.input_scale", LYNN_DTYPE_F32, 0, { 0 } },
		{ "c.weight", LYNN_DTYPE_F8_E4M3, 2, { 4, 16 } },
		{ "c.weight_scale_inv", LYNN_DTYPE_F32, 2, { 1, 1 } },
		{ "d.weight", LYNN_DTYPE_BF16, 1, { 10 } },
	};
	struct lynn_ckpt *c;
	int64_t counts[3], total = 0;
	uint8_t zero[64] = { 0 };

	for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
		ck_assert_int_eq(lynn_st_writer_declare(w, ts[i].name, ts[i].dt, ts[i].nd, ts[i].shape,
							&e), 0);
	for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
		int64_t n = 1;
		for (int d = 0; d < ts[i].nd; d++)
			n *= ts[i].shape[d];
		ck_assert_int_eq(lynn_st_writer_write(w, zero, (size_t)n * lynn_dtype_size(ts[i].dt),
						      &e), 0);
	}
	ck_assert_int_eq(lynn_st_writer_finish(w, &e), 0);
	lynn_st_writer_free(w);
	c = lynn_ckpt_open(dir, &e);
	ck_assert_msg(c != NULL, "%s", e.msg);
	ck_assert_uint_eq(lynn_ckpt_quant_formats(c, counts),
			  LYNN_QUANT_NVFP4_CT | LYNN_QUANT_NVFP4_MODELOPT | LYNN_QUANT_FP8);
	ck_assert(counts[0] == 1 && counts[1] == 1 && counts[2] == 1);
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++)
		total += lynn_ckpt_tensor_params(c, lynn_ckpt_tensor(c, i));
	ck_assert_int_eq(total, 64 + 64 + 64 + 10); /* [4,16] each for a, b, c; d 10 */
	ck_assert(lynn_tensor_is_scale("x.k_scale"));
	ck_assert(!lynn_tensor_is_scale("lm_head.weight"));
	ck_assert(!lynn_tensor_is_scale("x.weight_scale_2x"));
	lynn_ckpt_close(c);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

Suite *st_suite(void)
{
	Suite *s = suite_create("st");
	TCase *tc = tcase_create("st");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_dtype_names);
	tcase_add_test(tc, test_bf16_bits);
	tcase_add_test(tc, test_f16);
	tcase_add_test(tc, test_e4m3_all_codes);
	tcase_add_test(tc, test_e4m3_vs_torch);
	tcase_add_test(tc, test_convert_to_f32);
	tcase_add_test(tc, test_read_fixtures_agree);
	tcase_add_test(tc, test_find_decoder);
	tcase_add_test(tc, test_writer_matches_hf_single);
	tcase_add_test(tc, test_writer_matches_hf_sharded);
	tcase_add_test(tc, test_writer_shard_rule);
	tcase_add_test(tc, test_writer_errors);
	tcase_add_loop_test(tc, test_broken_files, 0,
			    (int)(sizeof broken_files / sizeof broken_files[0]));
	tcase_add_test(tc, test_open_mem);
	tcase_add_loop_test(tc, test_bad_index, 0, (int)(sizeof bad_indexes / sizeof bad_indexes[0]));
	tcase_add_test(tc, test_shard_tensor_not_in_index);
	tcase_add_test(tc, test_tensor_in_two_shards);
	tcase_add_test(tc, test_bad_shard_named);
	tcase_add_test(tc, test_config_fixtures);
	tcase_add_loop_test(tc, test_config_errors, 0,
			    (int)(sizeof bad_configs / sizeof bad_configs[0]));
	tcase_add_test(tc, test_config_fallbacks);
	tcase_add_test(tc, test_config_generation);
	tcase_add_test(tc, test_inspect_json);
	tcase_add_test(tc, test_inspect_text_and_usage);
	tcase_add_test(tc, test_inspect_gguf_and_config);
	tcase_add_test(tc, test_inspect_gguf);
	tcase_add_test(tc, test_quant_detection);
	suite_add_tcase(s, tc);
	return s;
}
