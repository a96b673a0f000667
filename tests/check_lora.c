/* check_lora.c - PEFT adapters: loading, mapping onto multimodal and
 * text-only bases, merge vs peft's merge_and_unload (tests/fixtures/README.md). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "lynn/fs.h"
#include "lynn/lora.h"
#include "lynn/model.h"
#include "lynn/st.h"
#include "testutil.h"

/* merge_and_unload on an f32 base adds an f32 delta computed by torch
 * (different summation order than ours): allow a few f32 ulps of the
 * weight's magnitude. */
#define LYNN_TOL_MERGE_F32_REL 4e-7f
/* On a bf16 base peft rounds B@A and the sum in bf16; we round once from f32:
 * results may differ by one bf16 ulp. */
#define LYNN_TOL_MERGE_BF16_ULPS 1

#define ADAPTER FIXTURES "/lora-tiny"

static void write_adapter_ex(const char *dir, const char *config_json, const char *rename_from,
			     const char *rename_to, bool zero_b)
{
	struct lynn_st_file *src = lynn_st_open(ADAPTER "/adapter_model.safetensors", NULL);
	struct lynn_st_writer *w;
	char *p;
	ck_assert_ptr_nonnull(src);
	p = lynn_path_join(dir, "adapter_config.json");
	tu_write(p, config_json, strlen(config_json));
	free(p);
	w = lynn_st_writer_create(dir, 0, NULL);
	ck_assert_ptr_nonnull(w);
	for (int64_t i = 0; i < lynn_st_n_tensors(src); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(src, i);
		char name[512];
		const char *hit = rename_from ? strstr(t->name, rename_from) : NULL;
		if (hit)
			snprintf(name, sizeof name, "%.*s%s%s", (int)(hit - t->name), t->name, rename_to,
				 hit + strlen(rename_from));
		else
			snprintf(name, sizeof name, "%s", t->name);
		ck_assert_int_eq(lynn_st_writer_declare(w, name, t->dtype, t->n_dims, t->shape, NULL), 0);
	}
	for (int64_t i = 0; i < lynn_st_n_tensors(src); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(src, i);
		if (zero_b && strstr(t->name, "lora_B")) {
			void *z = calloc(1, t->nbytes);
			ck_assert_int_eq(lynn_st_writer_write(w, z, t->nbytes, NULL), 0);
			free(z);
			continue;
		}
		ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes, NULL), 0);
	}
	ck_assert_int_eq(lynn_st_writer_finish(w, NULL), 0);
	lynn_st_writer_free(w);
	lynn_st_close(src);
	{ /* the writer names a single shard model.safetensors */
		char *from = lynn_path_join(dir, "model.safetensors");
		char *to = lynn_path_join(dir, "adapter_model.safetensors");
		ck_assert_int_eq(rename(from, to), 0);
		free(from);
		free(to);
	}
}

static void write_adapter(const char *dir, const char *config_json, const char *rename_from,
			  const char *rename_to)
{
	write_adapter_ex(dir, config_json, rename_from, rename_to, false);
}

START_TEST(test_open_and_bind)
{
	struct lynn_err e = { 0 };
	struct lynn_lora *l = lynn_lora_open(ADAPTER, &e);
	const char *bases[] = { FIXTURES "/qwen35moe-tiny-text-f32", FIXTURES "/qwen35moe-tiny-mm-f32",
				FIXTURES "/qwen35moe-tiny" };
	ck_assert_msg(l != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_lora_n_modules(l), 26);
	/* rank_pattern / alpha_pattern: out_proj has r 2, alpha 4 -> s 2; others r 4, alpha 8 */
	for (int i = 0; i < lynn_lora_n_modules(l); i++) {
		const struct lynn_lora_module *m = lynn_lora_module(l, i);
		bool out_proj = strstr(m->module, ".out_proj") != NULL;
		ck_assert_int_eq(m->r, out_proj ? 2 : 4);
		ck_assert_float_eq(m->scale, 2.0f);
		ck_assert(strncmp(m->decoder_name, "layers.", 7) == 0);
	}
	/* an adapter trained on the text-only model binds to text-only and multimodal bases */
	for (size_t b = 0; b < 3; b++) {
		struct lynn_ckpt *ck = lynn_ckpt_open(bases[b], &e);
		ck_assert_msg(ck != NULL, "%s", e.msg);
		ck_assert_msg(lynn_lora_bind(l, ck, &e) == 0, "%s: %s", bases[b], e.msg);
		ck_assert_ptr_nonnull(lynn_lora_find(l, "layers.1.self_attn.q_proj.weight"));
		lynn_ckpt_close(ck);
	}
	lynn_lora_free(l);
}
END_TEST

/* Same tolerances as the runner's f32 checks (tests/check_model.c). */
#define LYNN_TOL_LOGITS_MAXABS 1e-3
#define LYNN_TOL_LOGITS_COS 0.99999

/* The merged f32 model's logits equal HF's adapter-on logits (peft's merged
 * model gives the same up to 4.9e-4, gen_info.json). */
static void check_merged_logits(const char *dir)
{
	struct lynn_err e = { 0 };
	struct lynn_st_file *ref = lynn_st_open(FIXTURES "/lora_logits.safetensors", &e);
	const struct lynn_tensor *ids = lynn_st_find(ref, "ids.long");
	const struct lynn_tensor *want = lynn_st_find(ref, "logits_on.long");
	struct lynn_model *m = lynn_model_open(dir, NULL, &e);
	struct lynn_seq *sq;
	int64_t T = ids->n_elems, V = want->shape[1];
	float *got = malloc((size_t)(T * V) * sizeof *got);

	ck_assert_msg(m != NULL, "%s", e.msg);
	sq = lynn_seq_create(m, &e);
	ck_assert_int_eq(lynn_model_prefill(m, sq, ids->data, T, true, got, &e), 0);
	for (int64_t r = 0; r < T; r++) {
		double dot = 0, na = 0, nb = 0, mx = 0;
		for (int64_t v = 0; v < V; v++) {
			double a = got[r * V + v], b = ((const float *)want->data)[r * V + v];
			dot += a * b;
			na += a * a;
			nb += b * b;
			mx = fmax(mx, fabs(a - b));
		}
		ck_assert_msg(mx <= LYNN_TOL_LOGITS_MAXABS, "row %lld: max|d| %g", (long long)r, mx);
		ck_assert_msg(dot / sqrt(na * nb) >= LYNN_TOL_LOGITS_COS, "row %lld: cosine", (long long)r);
	}
	free(got);
	lynn_seq_free(sq);
	lynn_model_close(m);
	lynn_st_close(ref);
}

static void check_merge(const char *base, const char *expected, bool bf16)
{
	struct lynn_err e = { 0 };
	char *dir = tu_mkdtemp();
	struct lynn_lora *l = lynn_lora_open(ADAPTER, &e);
	struct lynn_ckpt *ck = lynn_ckpt_open(base, &e), *mg;
	struct lynn_st_file *ref = lynn_st_open(expected, &e);
	struct lynn_merge_opts opts = { .shard_size = 0, .dtype = -1 };
	int n_checked = 0;

	ck_assert_ptr_nonnull(l);
	ck_assert_ptr_nonnull(ck);
	ck_assert_ptr_nonnull(ref);
	ck_assert_int_eq(lynn_lora_bind(l, ck, &e), 0);
	ck_assert_msg(lynn_lora_merge(l, ck, dir, &opts, &e) == 0, "%s", e.msg);
	mg = lynn_ckpt_open(dir, &e);
	ck_assert_msg(mg != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_ckpt_n_tensors(mg), lynn_ckpt_n_tensors(ck));
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(ck); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(ck, i);
		const struct lynn_tensor *m = lynn_ckpt_find(mg, t->name);
		const struct lynn_tensor *r = lynn_st_find(ref, t->name);
		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->dtype, t->dtype);
		ck_assert_uint_eq(m->nbytes, t->nbytes);
		if (!r) { /* untargeted: byte for byte */
			ck_assert_msg(memcmp(m->data, t->data, t->nbytes) == 0, "'%s' changed", t->name);
			continue;
		}
		n_checked++;
		for (int64_t j = 0; j < t->n_elems; j++) {
			if (bf16) {
				int a = ((const uint16_t *)m->data)[j], b = ((const uint16_t *)r->data)[j];
				ck_assert_msg(abs(a - b) <= LYNN_TOL_MERGE_BF16_ULPS, "'%s'[%lld]: %04x vs %04x",
					      t->name, (long long)j, a, b);
			} else {
				float a = ((const float *)m->data)[j], b = ((const float *)r->data)[j];
				ck_assert_msg(fabsf(a - b) <= LYNN_TOL_MERGE_F32_REL * fmaxf(1.0f, fabsf(b)),
					      "'%s'[%lld]: %.9g vs %.9g", t->name, (long long)j, a, b);
			}
		}
	}
	ck_assert_int_eq(n_checked, 26);
	lynn_ckpt_close(mg);
	if (!bf16) { /* a loadable model: copy the config and check its logits */
		char *a = lynn_path_join(base, "config.json"), *b = lynn_path_join(dir, "config.json");
		ck_assert_int_eq(lynn_file_copy(a, b, NULL), 0);
		free(a);
		free(b);
		check_merged_logits(dir);
	}
	lynn_st_close(ref);
	lynn_ckpt_close(ck);
	lynn_lora_free(l);
	lynn_rm_rf(dir);
	free(dir);
}

START_TEST(test_merge_f32_matches_peft)
{
	check_merge(FIXTURES "/qwen35moe-tiny-text-f32", FIXTURES "/lora_merged_f32.safetensors", false);
}
END_TEST

START_TEST(test_merge_bf16_matches_peft)
{
	check_merge(FIXTURES "/qwen35moe-tiny-text-bf16", FIXTURES "/lora_merged_bf16.safetensors", true);
}
END_TEST

static const char base_config[] =
	"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"bias\": \"none\", "
	"\"rank_pattern\": {\"out_proj\": 2}, \"alpha_pattern\": {\"out_proj\": 4}, "
	"\"target_modules\": [\"q_proj\"]}";

START_TEST(test_unmatched_keys_listed)
{
	struct lynn_err e = { 0 };
	char *dir = tu_mkdtemp();
	struct lynn_lora *l;
	struct lynn_ckpt *ck = lynn_ckpt_open(FIXTURES "/qwen35moe-tiny-text-f32", &e);
	write_adapter(dir, base_config, "self_attn.q_proj", "self_attn.qq_proj");
	l = lynn_lora_open(dir, &e);
	ck_assert_msg(l != NULL, "%s", e.msg);
	ck_assert_int_eq(lynn_lora_bind(l, ck, &e), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "qq_proj"));
	ck_assert_ptr_nonnull(strstr(e.msg, "2 of 26"));
	lynn_lora_free(l);
	lynn_ckpt_close(ck);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_refused_configs)
{
	static const struct { const char *config; int code; const char *needle; } cases[] = {
		{ "{\"r\": 4, \"lora_alpha\": 8, \"use_dora\": true}", -LYNN_EUNSUPPORTED, "DoRA" },
		{ "{\"peft_type\": \"IA3\", \"r\": 4, \"lora_alpha\": 8}", -LYNN_EUNSUPPORTED, "IA3" },
		{ "{\"r\": 4, \"lora_alpha\": 8, \"bias\": \"all\"}", -LYNN_EUNSUPPORTED, "bias" },
		{ "{\"lora_alpha\": 8}", -LYNN_ENOTFOUND, "'r'" },
		{ "{\"r\": 0, \"lora_alpha\": 8}", -LYNN_EFORMAT, "positive" },
		{ "{\"r\": \"4\", \"lora_alpha\": 8}", -LYNN_EFORMAT, "'r'" },
		{ "{\"r\": 4, \"lora_alpha\": 8", -LYNN_EFORMAT, "adapter_config.json" },
		{ "{\"r\": 8, \"lora_alpha\": 8}", -LYNN_EFORMAT, "rank 4 but the config says 8" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct lynn_err e = { 0 };
		char *dir = tu_mkdtemp();
		write_adapter(dir, cases[i].config, NULL, NULL);
		ck_assert_ptr_null(lynn_lora_open(dir, &e));
		ck_assert_msg(e.code == cases[i].code, "case %zu: %d %s", i, e.code, e.msg);
		ck_assert_msg(strstr(e.msg, cases[i].needle), "case %zu: %s", i, e.msg);
		lynn_rm_rf(dir);
		free(dir);
	}
	/* a DoRA magnitude tensor is refused even without use_dora */
	{
		struct lynn_err e = { 0 };
		char *dir = tu_mkdtemp();
		write_adapter(dir, base_config, "lora_A.weight", "lora_magnitude_vector.weight");
		ck_assert_ptr_null(lynn_lora_open(dir, &e));
		ck_assert_int_eq(e.code, -LYNN_EUNSUPPORTED);
		lynn_rm_rf(dir);
		free(dir);
	}
	{
		struct lynn_err e = { 0 };
		ck_assert_ptr_null(lynn_lora_open("/no/such/adapter", &e));
		ck_assert_int_eq(e.code, -LYNN_ENOTFOUND);
	}
}
END_TEST

/* ---- lynn sanity / lynn merge ---- */

/* Mean |logits_on - logits_off| of our f32 runner vs peft's: the logits agree
 * to 1e-3 max (runner tolerance), their mean differences far closer. */
#define LYNN_TOL_SANITY_DIFF 1e-4

START_TEST(test_sanity_matches_peft)
{
	char *dir = tu_mkdtemp(), cmd[1024], *rep, *ref;
	struct tu_run r;
	cJSON *a, *b;
	snprintf(cmd, sizeof cmd, "sanity --base %s/qwen35moe-tiny-text-f32 --adapter %s --out-json %s/s.json",
		 FIXTURES, ADAPTER, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "__DIFF_SANITY_PASS__\n"));
	snprintf(cmd, sizeof cmd, "%s/s.json", dir);
	rep = tu_read(cmd, NULL);
	ref = tu_read(FIXTURES "/lora_sanity.json", NULL);
	a = cJSON_Parse(rep);
	b = cJSON_Parse(ref);
	ck_assert_str_eq(cJSON_GetObjectItem(a, "schema_version")->valuestring, "lynn-diff-sanity-v1");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(a, "pass")));
	ck_assert_int_eq(cJSON_GetObjectItem(a, "n_total")->valueint, 5);
	for (int i = 0; i < 5; i++) {
		cJSON *x = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "items"), i);
		cJSON *y = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "items"), i);
		ck_assert_str_eq(cJSON_GetObjectItem(x, "prompt")->valuestring,
				 cJSON_GetObjectItem(y, "prompt")->valuestring);
		ck_assert_double_eq_tol(cJSON_GetObjectItem(x, "diff")->valuedouble,
					cJSON_GetObjectItem(y, "diff")->valuedouble, LYNN_TOL_SANITY_DIFF);
	}
	cJSON_Delete(a);
	cJSON_Delete(b);
	free(rep);
	free(ref);
	tu_run_free(&r);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_sanity_failures)
{
	char *dir = tu_mkdtemp(), *ad, cmd[1024];
	struct tu_run r;
	/* keys that match nothing: FAIL with the list */
	ck_assert(asprintf(&ad, "%s/nomatch", dir) > 0);
	mkdir(ad, 0755);
	write_adapter(ad, base_config, "model.layers", "model.blocks");
	snprintf(cmd, sizeof cmd, "sanity --base %s/qwen35moe-tiny --adapter %s --out-json %s/r.json",
		 FIXTURES, ad, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.out, "__DIFF_SANITY_FAIL__"));
	ck_assert_ptr_nonnull(strstr(r.err, "blocks.0"));
	tu_run_free(&r);
	free(ad);
	/* a zero adapter changes nothing: FAIL */
	ck_assert(asprintf(&ad, "%s/zero", dir) > 0);
	mkdir(ad, 0755);
	write_adapter_ex(ad, base_config, NULL, NULL, true);
	snprintf(cmd, sizeof cmd, "sanity --base %s/qwen35moe-tiny --adapter %s", FIXTURES, ad);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.out, "0/5 prompts"));
	tu_run_free(&r);
	free(ad);
	/* DoRA: unsupported, exit 2 */
	ck_assert(asprintf(&ad, "%s/dora", dir) > 0);
	mkdir(ad, 0755);
	write_adapter(ad, "{\"r\": 4, \"lora_alpha\": 8, \"use_dora\": true}", NULL, NULL);
	snprintf(cmd, sizeof cmd, "sanity --base %s/qwen35moe-tiny --adapter %s", FIXTURES, ad);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "DoRA"));
	tu_run_free(&r);
	free(ad);
	r = tu_lynn("sanity --base x", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* Copy a checkpoint folder leaving out one tensor. */
static void copy_without(const char *src, const char *dst, const char *drop)
{
	struct lynn_ckpt *ck = lynn_ckpt_open(src, NULL);
	struct lynn_st_writer *w;
	const char *files[] = { "config.json", "generation_config.json", "tokenizer.json",
				"tokenizer_config.json", "chat_template.jinja" };
	ck_assert_ptr_nonnull(ck);
	w = lynn_st_writer_create(dst, 0, NULL);
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(ck); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(ck, i);
		if (strcmp(t->name, drop))
			ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, NULL), 0);
	}
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(ck); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(ck, i);
		if (strcmp(t->name, drop))
			ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes, NULL), 0);
	}
	ck_assert_int_eq(lynn_st_writer_finish(w, NULL), 0);
	lynn_st_writer_free(w);
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		char *a = lynn_path_join(src, files[i]), *b = lynn_path_join(dst, files[i]);
		ck_assert_int_eq(lynn_file_copy(a, b, NULL), 0);
		free(a);
		free(b);
	}
	lynn_ckpt_close(ck);
}

START_TEST(test_merge_cli)
{
	char *dir = tu_mkdtemp(), cmd[1024], path[512];
	struct tu_run r;
	struct lynn_ckpt *ck;
	/* sharded output with index and the ship files */
	/* the tiny model's weights are random: its greedy text is not readable,
	 * which is what the coherence check exists to catch */
	snprintf(cmd, sizeof cmd, "merge --base %s/qwen35moe-tiny-text-f32 --adapter %s --output %s/out",
		 FIXTURES, ADAPTER, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.out, "FAIL_COHERENCE"));
	tu_run_free(&r);
	snprintf(path, sizeof path, "%s/out", dir);
	ck_assert(!lynn_dir_exists(path));
	snprintf(cmd, sizeof cmd, "merge --base %s/qwen35moe-tiny-text-f32 --adapter %s --output %s/out "
		 "--shard-size 300KB --skip-coherence", FIXTURES, ADAPTER, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 0, "%s", r.err);
	tu_run_free(&r);
	for (const char *const *f = (const char *const[]){ "model.safetensors.index.json", "config.json",
			"generation_config.json", "tokenizer.json", "tokenizer_config.json",
			"chat_template.jinja", NULL }; *f; f++) {
		snprintf(path, sizeof path, "%s/out/%s", dir, *f);
		ck_assert_msg(lynn_file_exists(path), "missing %s", *f);
	}
	snprintf(path, sizeof path, "%s/out", dir);
	ck = lynn_ckpt_open(path, NULL);
	ck_assert_ptr_nonnull(ck);
	ck_assert_int_gt(lynn_ckpt_n_files(ck), 1);
	lynn_ckpt_close(ck);
	/* a non-empty output folder needs --force */
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "--force"));
	tu_run_free(&r);
	/* a base with a missing expert is refused (coherence check, then the weight check) */
	snprintf(path, sizeof path, "%s/broken", dir);
	mkdir(path, 0755);
	copy_without(FIXTURES "/qwen35moe-tiny-text-f32", path,
		     "model.layers.2.mlp.experts.5.up_proj.weight");
	snprintf(cmd, sizeof cmd, "merge --base %s --adapter %s --output %s/out2", path, ADAPTER, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "experts"));
	tu_run_free(&r);
	snprintf(path, sizeof path, "%s/out2", dir);
	ck_assert(!lynn_dir_exists(path));
	snprintf(cmd, sizeof cmd, "merge --base %s/broken --adapter %s --output %s/out2 --skip-coherence",
		 dir, ADAPTER, dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 0); /* without the check the merge itself only copies bytes */
	tu_run_free(&r);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

Suite *lora_suite(void)
{
	Suite *s = suite_create("lora");
	TCase *tc = tcase_create("lora");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_open_and_bind);
	tcase_add_test(tc, test_merge_f32_matches_peft);
	tcase_add_test(tc, test_merge_bf16_matches_peft);
	tcase_add_test(tc, test_unmatched_keys_listed);
	tcase_add_test(tc, test_refused_configs);
	suite_add_tcase(s, tc);
	tc = tcase_create("cli");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_sanity_matches_peft);
	tcase_add_test(tc, test_sanity_failures);
	tcase_add_test(tc, test_merge_cli);
	suite_add_tcase(s, tc);
	return s;
}
