/*
 * check_pack.c - `lynn pack` (src/eval/pack*.c, src/cmd/pack.c), on scenario
 * folders built from the tiny Hugging Face fixtures: every case checks the
 * exit code and the lynn-pack-v1 report (which gate failed, and why).
 * Oracles: the fixtures themselves (HF wrote the shards and the index that
 * --write-index must reproduce); the broken variants are made here from
 * them, one defect each.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/st.h"
#include "testutil.h"

#define TINY FIXTURES "/qwen35moe-tiny"
#define TINY_MM_F32 FIXTURES "/qwen35moe-tiny-mm-f32"
#define TINY_TEXT_F32 FIXTURES "/qwen35moe-tiny-text-f32"

static const char *const tok_files[] = { "tokenizer.json", "tokenizer_config.json",
					 "chat_template.jinja", "generation_config.json" };

/* ===== helpers ===== */

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[2048];
	struct tu_run r;
	snprintf(cmd, sizeof cmd, fmt, a, b);
	r = tu_sh(cmd, NULL);
	ck_assert_msg(r.status == 0, "%s: %s", cmd, r.err);
	tu_run_free(&r);
}

/* A target folder with the weights and config.json of `src` only, as a
 * quantizer writes it. */
static char *target_from(const char *src, bool with_tok)
{
	char *dir = tu_mkdtemp();
	sh("cp %s/*.safetensors* %s/", src, dir);
	sh("cp %s/config.json %s/", src, dir);
	if (with_tok)
		for (size_t i = 0; i < 4; i++) {
			char a[512];
			snprintf(a, sizeof a, "%s/%s", src, tok_files[i]);
			sh("cp %s %s/", a, dir);
		}
	return dir;
}

static void rm_target(char *dir)
{
	lynn_rm_rf(dir);
	free(dir);
}

struct pack_out {
	int status;
	cJSON *rep;
	char *err;
};

static struct pack_out run_pack(const char *src, const char *dst, const char *extra)
{
	char *args;
	struct tu_run r;
	struct pack_out o;
	ck_assert(asprintf(&args, "pack --json %s '%s' '%s'", extra ? extra : "", src, dst) > 0);
	r = tu_lynn(args, NULL, NULL);
	free(args);
	o.status = r.status;
	o.rep = r.out && r.out[0] ? cJSON_Parse(r.out) : NULL;
	o.err = r.err;
	r.err = NULL;
	tu_run_free(&r);
	return o;
}

static void pack_out_free(struct pack_out *o)
{
	cJSON_Delete(o->rep);
	free(o->err);
}

static const cJSON *gate(const struct pack_out *o, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o->rep, "gates"),
						name);
}

static bool gate_pass(const struct pack_out *o, const char *name)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gate(o, name), "pass"));
}

/* Does some reason of the gate contain `needle`? */
static bool has_reason(const struct pack_out *o, const char *name, const char *needle)
{
	const cJSON *r;
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(gate(o, name), "reasons"))
		if (strstr(r->valuestring, needle))
			return true;
	return false;
}

static char *reasons_text(const struct pack_out *o)
{
	return o->rep ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o->rep, "gates"))
		      : strdup(o->err ? o->err : "");
}

#define ASSERT_REASON(o, g, needle)                                                     \
	do {                                                                            \
		char *_t = reasons_text(&(o));                                          \
		ck_assert_msg(has_reason(&(o), g, needle), "gate %s lacks '%s': %s", g, \
			      needle, _t);                                              \
		free(_t);                                                               \
	} while (0)

/* Rewrite a safetensors file, dropping tensor `drop` and giving tensor
 * `reshape` the 2-D shape `shape` (same bytes). */
static void rewrite(const char *src, const char *dst, const char *drop, const char *reshape,
		    const int64_t shape[2])
{
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open(src, &e);
	char *tmp = tu_mkdtemp(), *out = lynn_path_join(tmp, "model.safetensors");
	struct lynn_st_writer *w = lynn_st_writer_create(tmp, 0, &e);
	ck_assert_msg(f != NULL, "%s", e.msg);
	lynn_st_writer_set_metadata(w, "format", "pt", &e);
	for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(f, i);
		if (drop && !strcmp(t->name, drop))
			continue;
		if (reshape && !strcmp(t->name, reshape))
			ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, 2, shape, &e), 0);
		else
			ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims,
								t->shape, &e), 0);
	}
	for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(f, i);
		if (!drop || strcmp(t->name, drop))
			ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes, &e), 0);
	}
	ck_assert_msg(lynn_st_writer_finish(w, &e) == 0, "%s", e.msg);
	lynn_st_writer_free(w);
	lynn_st_close(f);
	ck_assert_int_eq(rename(out, dst), 0);
	free(out);
	rm_target(tmp);
}

/* ===== scenarios ===== */

START_TEST(test_complete_bf16)
{
	char *dst = target_from(TINY, true);
	struct pack_out o = run_pack(TINY, dst, NULL);
	const cJSON *r = o.rep;
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	ck_assert_ptr_nonnull(r);
	/* schema_version first, then created_at */
	ck_assert_str_eq(r->child->string, "schema_version");
	ck_assert_str_eq(r->child->valuestring, "lynn-pack-v1");
	ck_assert_str_eq(r->child->next->string, "created_at");
	ck_assert_str_eq(cJSON_GetObjectItem(r, "source")->valuestring, TINY);
	ck_assert_str_eq(cJSON_GetObjectItem(r, "target")->valuestring, dst);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "copied")), 0);
	ck_assert(gate_pass(&o, "files") && gate_pass(&o, "tokenizer") && gate_pass(&o, "weights"));
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "pass")));
	/* fused experts: 4 layers of linears and norms were checked */
	ck_assert_int_gt(cJSON_GetObjectItem(gate(&o, "weights"), "n_checked")->valueint, 60);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(gate(&o, "tokenizer"), "probes")), 5);
	pack_out_free(&o);
	rm_target(dst);
}
END_TEST

/* The classic: a quantizer's folder without tokenizer files. They are copied,
 * existing files are never overwritten, the BF16 index never copied. */
START_TEST(test_copies_missing_files)
{
	char *dst = target_from(TINY_MM_F32, false);
	char *gen = lynn_path_join(dst, "generation_config.json"), *got;
	const char *mine = "{\"eos_token_id\": [482, 480], \"note\": \"mine\"}";
	struct pack_out o;
	const cJSON *c;
	int n = 0;

	tu_write(gen, mine, strlen(mine));
	o = run_pack(TINY_TEXT_F32, dst, NULL); /* a sharded source with an index */
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(o.rep, "copied")) {
		char *p = lynn_path_join(dst, c->valuestring);
		ck_assert(lynn_file_exists(p));
		ck_assert_str_ne(c->valuestring, "generation_config.json");
		free(p);
		n++;
	}
	ck_assert_int_eq(n, 3); /* tokenizer.json, tokenizer_config.json, chat_template.jinja */
	got = tu_read(gen, NULL);
	ck_assert_str_eq(got, mine);
	free(got);
	free(gen);
	{
		char *ix = lynn_path_join(dst, "model.safetensors.index.json");
		ck_assert(!lynn_file_exists(ix));
		free(ix);
	}
	pack_out_free(&o);
	/* a second run has nothing to copy */
	o = run_pack(TINY_TEXT_F32, dst, NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o.rep, "copied")), 0);
	pack_out_free(&o);
	rm_target(dst);
}
END_TEST

START_TEST(test_dry_run_changes_nothing)
{
	char *dst = target_from(TINY, false), *before, *after;
	char cmd[600];
	struct tu_run r;
	struct pack_out o;

	snprintf(cmd, sizeof cmd, "ls -lA --time-style=full-iso '%s'", dst);
	r = tu_sh(cmd, NULL);
	before = r.out;
	r.out = NULL;
	tu_run_free(&r);
	o = run_pack(TINY, dst, "--dry-run --write-index");
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err); /* would pass */
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o.rep, "dry_run")));
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o.rep, "copied")), 4);
	r = tu_sh(cmd, NULL);
	after = r.out;
	r.out = NULL;
	tu_run_free(&r);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
	pack_out_free(&o);
	rm_target(dst);
}
END_TEST

START_TEST(test_missing_config)
{
	char *dst = target_from(TINY, true), *p = lynn_path_join(dst, "config.json");
	struct pack_out o;
	unlink(p);
	o = run_pack(TINY, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(!gate_pass(&o, "files"));
	ASSERT_REASON(o, "files", "missing config.json");
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(o.rep, "pass")));
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_bad_tokenizer)
{
	char *dst = target_from(TINY, true), *p = lynn_path_join(dst, "tokenizer.json");
	const char *bad = "{\"model\": {\"type\": \"BPE\", \"vocab\": 7}}";
	struct pack_out o;
	tu_write(p, bad, strlen(bad));
	o = run_pack(TINY, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(gate_pass(&o, "files"));
	ck_assert(!gate_pass(&o, "tokenizer"));
	ASSERT_REASON(o, "tokenizer", "tokenizer does not load");
	ck_assert(gate_pass(&o, "weights"));
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_bad_template)
{
	char *dst = target_from(TINY, true), *p = lynn_path_join(dst, "chat_template.jinja");
	const char *bad = "{% for m in messages %}{{ m.content }";
	struct pack_out o;
	tu_write(p, bad, strlen(bad));
	o = run_pack(TINY, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(!gate_pass(&o, "tokenizer"));
	ASSERT_REASON(o, "tokenizer", "chat template");
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_index_missing_shard)
{
	char *dst = target_from(TINY_TEXT_F32, true);
	char *p = lynn_path_join(dst, "model-00003-of-00006.safetensors");
	struct pack_out o;
	unlink(p);
	o = run_pack(TINY_TEXT_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "files", "missing shard model-00003-of-00006.safetensors");
	ASSERT_REASON(o, "weights", "names shard 'model-00003-of-00006.safetensors', which is missing");
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_tensor_missing_from_shard)
{
	char *dst = target_from(TINY_TEXT_F32, true);
	char *p = lynn_path_join(dst, "model-00002-of-00006.safetensors");
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open(p, &e);
	char name[256];
	struct pack_out o;

	ck_assert_ptr_nonnull(f);
	snprintf(name, sizeof name, "%s", lynn_st_tensor(f, 0)->name);
	lynn_st_close(f);
	rewrite(TINY_TEXT_F32 "/model-00002-of-00006.safetensors", p, name, NULL, NULL);
	o = run_pack(TINY_TEXT_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(gate_pass(&o, "files"));
	ASSERT_REASON(o, "weights", "but no shard has it");
	ASSERT_REASON(o, "weights", name);
	ck_assert(gate_pass(&o, "tokenizer"));
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_shard_tensor_not_in_index)
{
	char *dst = target_from(TINY_TEXT_F32, true);
	char *p = lynn_path_join(dst, "model.safetensors.index.json");
	struct lynn_err e;
	cJSON *ix = lynn_json_load(p, 1 << 20, &e);
	struct pack_out o;

	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(ix, "weight_map"),
						"model.norm.weight");
	ck_assert_int_eq(lynn_json_write(p, ix, &e), 0);
	cJSON_Delete(ix);
	o = run_pack(TINY_TEXT_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", "tensor 'model.norm.weight' of shard");
	ASSERT_REASON(o, "weights", "is not in the index");
	pack_out_free(&o);
	/* --write-index rebuilds it from the shards: HF's own index again */
	o = run_pack(TINY_TEXT_F32, dst, "--write-index");
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o.rep, "index_written")));
	{
		cJSON *mine = lynn_json_load(p, 1 << 20, &e);
		cJSON *hf = lynn_json_load(TINY_TEXT_F32 "/model.safetensors.index.json", 1 << 20, &e);
		ck_assert(cJSON_Compare(cJSON_GetObjectItem(mine, "weight_map"),
					cJSON_GetObjectItem(hf, "weight_map"), 1));
		ck_assert_double_eq(
			cJSON_GetObjectItem(cJSON_GetObjectItem(mine, "metadata"), "total_size")->valuedouble,
			cJSON_GetObjectItem(cJSON_GetObjectItem(hf, "metadata"), "total_size")->valuedouble);
		cJSON_Delete(mine);
		cJSON_Delete(hf);
	}
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

/* Shards without any index: gate 1 fails until --write-index builds one. */
START_TEST(test_write_index_from_nothing)
{
	char *dst = target_from(TINY_TEXT_F32, true);
	char *p = lynn_path_join(dst, "model.safetensors.index.json");
	struct pack_out o;
	unlink(p);
	o = run_pack(TINY_TEXT_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "files", "missing weights");
	ck_assert(gate_pass(&o, "weights")); /* the shards themselves are fine */
	pack_out_free(&o);
	o = run_pack(TINY_TEXT_F32, dst, "--write-index");
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	ck_assert(lynn_file_exists(p));
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_missing_expert)
{
	char *dst = target_from(TINY_MM_F32, true), *p = lynn_path_join(dst, "model.safetensors");
	const char *gone = "model.language_model.layers.1.mlp.experts.5.down_proj.weight";
	struct pack_out o;
	rewrite(TINY_MM_F32 "/model.safetensors", p, gone, NULL, NULL);
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(gate_pass(&o, "files") && gate_pass(&o, "tokenizer"));
	ASSERT_REASON(o, "weights", "missing tensor 'model.language_model.layers.1.mlp.experts.5.down_proj.weight'");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(gate(&o, "weights"), "reasons")), 1);
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

START_TEST(test_wrong_shape)
{
	char *dst = target_from(TINY, true), *p = lynn_path_join(dst, "model.safetensors");
	const char *name = "model.language_model.layers.0.mlp.shared_expert.down_proj.weight";
	const int64_t transposed[2] = { 32, 64 }; /* [H, SI] is [64, 32] */
	struct pack_out o;
	rewrite(TINY "/model.safetensors", p, NULL, name, transposed);
	o = run_pack(TINY, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", "'model.language_model.layers.0.mlp.shared_expert.down_proj.weight' (model.safetensors): shape [32, 64] BF16, expected [64, 32]");
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

/* ===== a compressed-tensors NVFP4 variant of the tiny model ===== */

enum nvfp4_defect { NV_OK, NV_NAN_SCALE, NV_NO_GLOBAL, NV_BAD_BLOCK, NV_MODELOPT };

/* Every 2-D `*_proj.weight` of the per-expert f32 model becomes
 * weight_packed U8 [N, K/2] + weight_scale F8_E4M3 [N, K/16] (1.0) +
 * weight_global_scale F32 [1] (1.0) + input_global_scale F32 [1] (1.0);
 * NV_MODELOPT: the ModelOpt names instead (weight U8, weight_scale,
 * weight_scale_2, input_scale; all 1.0 as well). */
/* The quantization config of the folder dst: config.json's
 * quantization_config set to qc (JSON text; NULL: none) and
 * hf_quant_config.json written with hf (NULL: removed). */
static void set_qconfig(const char *dst, const char *qc, const char *hf)
{
	struct lynn_err e = { 0 };
	char *cp = lynn_path_join(dst, "config.json"), *hp = lynn_path_join(dst, "hf_quant_config.json");
	cJSON *c = lynn_json_load(cp, 1 << 20, &e);
	ck_assert_msg(c != NULL, "%s", e.msg);
	cJSON_DeleteItemFromObject(c, "quantization_config");
	if (qc) {
		cJSON *q = cJSON_Parse(qc);
		ck_assert_msg(q != NULL, "bad test JSON %s", qc);
		cJSON_AddItemToObject(c, "quantization_config", q);
	}
	char *text = cJSON_Print(c);
	ck_assert_int_eq(lynn_write_atomic(cp, text, strlen(text), &e), 0);
	free(text);
	cJSON_Delete(c);
	unlink(hp);
	if (hf)
		ck_assert_int_eq(lynn_write_atomic(hp, hf, strlen(hf), &e), 0);
	free(cp);
	free(hp);
}

/* What write_nvfp4 leaves unquantized (the in_proj_* linears, the router,
 * the shared expert's gate, lm_head), as compressed-tensors' ignore (names
 * and re.match patterns) and ModelOpt's exclude_modules (fnmatch) */
#define CT_QC(ignore)                                                                                     \
	"{\"quant_method\":\"compressed-tensors\",\"format\":\"nvfp4-pack-quantized\",\"config_groups\":"   \
	"{\"group_0\":{\"targets\":[\"Linear\"],\"format\":\"nvfp4-pack-quantized\"}},\"ignore\":[" ignore "]}"
#define CT_IGNORE "\"lm_head\",\"re:.*in_proj_\",\"re:.*mlp[.]gate$\",\"re:.*shared_expert_gate$\""
#define MO_EXCLUDE "[\"lm_head\",\"*in_proj_*\",\"*mlp.gate\",\"*shared_expert_gate\"]"

/* pack of dst (an NVFP4 copy of TINY_MM_F32) with quantization config
 * qc in config.json fails gate 3 naming `reason` (and `also`, if any) */
static void qconfig_refused(const char *dst, const char *qc, const char *reason, const char *also)
{
	set_qconfig(dst, qc, NULL);
	struct pack_out o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", reason);
	if (also)
		ASSERT_REASON(o, "weights", also);
	pack_out_free(&o);
}

static void write_nvfp4(const char *dst_file, enum nvfp4_defect defect)
{
	struct lynn_err e;
	struct lynn_st_file *f = lynn_st_open(TINY_MM_F32 "/model.safetensors", &e);
	char *tmp = tu_mkdtemp(), *out = lynn_path_join(tmp, "model.safetensors");
	struct lynn_st_writer *w = lynn_st_writer_create(tmp, 0, &e);
	static uint8_t zeros[65536], ones[65536];
	const char *target = "model.language_model.layers.2.mlp.experts.3.up_proj";
	const bool mo = defect == NV_MODELOPT;
	int pass_n;

	memset(ones, 0x38, sizeof ones); /* E4M3 1.0 */
	ck_assert_ptr_nonnull(f);
	for (pass_n = 0; pass_n < 2; pass_n++)
		for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
			const struct lynn_tensor *t = lynn_st_tensor(f, i);
			size_t l = strlen(t->name);
			bool quant = t->n_dims == 2 && l > 12 && !strcmp(t->name + l - 12, "_proj.weight") &&
				     strncmp(t->name, "model.visual.", 13);
			if (!quant) {
				if (pass_n == 0)
					ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims,
										t->shape, &e), 0);
				else
					ck_assert_int_eq(lynn_st_writer_write(w, t->data, t->nbytes, &e), 0);
				continue;
			}
			{
				char base[256], nm[300];
				int64_t N = t->shape[0], K = t->shape[1];
				int64_t sq[2] = { N, K / 2 }, ss[2] = { N, K / 16 }, one[1] = { 1 };
				float g = 1.0f;
				bool is_target;
				snprintf(base, sizeof base, "%.*s", (int)(l - 7), t->name);
				is_target = !strcmp(base, target);
				if (defect == NV_NAN_SCALE && is_target)
					g = NAN;
				if (pass_n == 0) {
					snprintf(nm, sizeof nm, "%s.%s", base, mo ? "weight" : "weight_packed");
					ck_assert_int_eq(lynn_st_writer_declare(w, nm, LYNN_DTYPE_U8, 2, sq, &e), 0);
					snprintf(nm, sizeof nm, "%s.weight_scale", base);
					ck_assert_int_eq(lynn_st_writer_declare(w, nm, LYNN_DTYPE_F8_E4M3, 2, ss, &e), 0);
					if (!(defect == NV_NO_GLOBAL && is_target)) {
						snprintf(nm, sizeof nm, "%s.%s", base,
							 mo ? "weight_scale_2" : "weight_global_scale");
						ck_assert_int_eq(lynn_st_writer_declare(w, nm, LYNN_DTYPE_F32, 1, one, &e), 0);
					}
					snprintf(nm, sizeof nm, "%s.%s", base,
						 mo ? "input_scale" : "input_global_scale");
					ck_assert_int_eq(lynn_st_writer_declare(w, nm, LYNN_DTYPE_F32, 1, one, &e), 0);
				} else {
					float one_f = 1.0f;
					ck_assert_int_eq(lynn_st_writer_write(w, zeros, (size_t)(N * K / 2), &e), 0);
					if (defect == NV_BAD_BLOCK && is_target) {
						uint8_t sc[4096];
						memcpy(sc, ones, (size_t)(N * K / 16));
						sc[5] = 0x7f; /* E4M3 NaN */
						ck_assert_int_eq(lynn_st_writer_write(w, sc, (size_t)(N * K / 16), &e), 0);
					} else {
						ck_assert_int_eq(lynn_st_writer_write(w, ones, (size_t)(N * K / 16), &e), 0);
					}
					if (!(defect == NV_NO_GLOBAL && is_target))
						ck_assert_int_eq(lynn_st_writer_write(w, &g, 4, &e), 0);
					ck_assert_int_eq(lynn_st_writer_write(w, &one_f, 4, &e), 0);
				}
			}
		}
	ck_assert_msg(lynn_st_writer_finish(w, &e) == 0, "%s", e.msg);
	lynn_st_writer_free(w);
	lynn_st_close(f);
	ck_assert_int_eq(rename(out, dst_file), 0);
	free(out);
	rm_target(tmp);
	char *dir = strndup(dst_file, strlen(dst_file) - strlen("/model.safetensors"));
	if (mo)
		set_qconfig(dir, "{\"quant_method\":\"modelopt\",\"quant_algo\":\"NVFP4\",\"exclude_modules\":" MO_EXCLUDE "}",
			    NULL);
	else
		set_qconfig(dir, CT_QC(CT_IGNORE), NULL);
	free(dir);
}

START_TEST(test_nvfp4)
{
	char *dst = target_from(TINY_MM_F32, false), *p = lynn_path_join(dst, "model.safetensors");
	const cJSON *fmt;
	struct pack_out o;

	write_nvfp4(p, NV_OK);
	o = run_pack(TINY_MM_F32, dst, "--scan-scales");
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	fmt = cJSON_GetObjectItem(gate(&o, "weights"), "linear_formats");
	/* the *_proj.weight linears: per layer 3 x 8 experts + 3 shared, plus
	 * out_proj (2 linear-attention layers) or q/k/v/o_proj (2 full) */
	ck_assert_int_eq(cJSON_GetObjectItem(fmt, "nvfp4_compressed_tensors")->valueint,
			 2 * (24 + 3 + 1) + 2 * (24 + 3 + 4));
	pack_out_free(&o);

	write_nvfp4(p, NV_MODELOPT);
	o = run_pack(TINY_MM_F32, dst, "--scan-scales");
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	fmt = cJSON_GetObjectItem(gate(&o, "weights"), "linear_formats");
	ck_assert_int_eq(cJSON_GetObjectItem(fmt, "nvfp4_modelopt")->valueint,
			 2 * (24 + 3 + 1) + 2 * (24 + 3 + 4));
	ck_assert_int_eq(cJSON_GetObjectItem(fmt, "nvfp4_compressed_tensors")->valueint, 0);

	/* the quantization config must say what the tensors are: */
	const cJSON *qc = cJSON_GetObjectItem(gate(&o, "weights"), "quant_config");
	ck_assert_str_eq(cJSON_GetObjectItem(qc, "kind")->valuestring, "modelopt nvfp4");
	/* every linear: per layer the NVFP4 ones above and the plain router and
	 * shared-expert gate (and in_proj_qkv, _z, _b, _a in the linear-attention
	 * ones); lm_head and embed_tokens */
	ck_assert_int_eq(cJSON_GetObjectItem(qc, "n_cross_checked")->valueint,
			 2 * (24 + 3 + 1 + 2 + 4) + 2 * (24 + 3 + 4 + 2) + 2);
	pack_out_free(&o);
	/* ModelOpt's own file where config.json has none */
	set_qconfig(dst, NULL, "{\"producer\":{\"name\":\"modelopt\"},\"quantization\":{\"quant_algo\":\"NVFP4\","
		    "\"group_size\":16,\"exclude_modules\":" MO_EXCLUDE "}}");
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	pack_out_free(&o);
	/* ModelOpt tensors under a compressed-tensors config */
	qconfig_refused(dst, CT_QC(CT_IGNORE), "config.json quantization_config is compressed-tensors but these linears use the other producer's NVFP4 names", NULL);

	write_nvfp4(p, NV_OK);
	/* no quantization config at all: loaders would build a plain model */
	qconfig_refused(dst, NULL, "quantized linears ('model.language_model.layers.0.linear_attn.out_proj'",
			"but config.json has no quantization_config");
	/* the config quantizes linears stored plain (the in_proj_* ones are
	 * not in this ignore list) */
	qconfig_refused(dst, CT_QC("\"lm_head\",\"re:.*mlp[.]gate$\",\"re:.*shared_expert_gate$\""),
			"quantizes linears stored unquantized ('model.language_model.layers.0.linear_attn.in_proj_qkv'", NULL);
	/* ... and leaves linears plain that are stored NVFP4 (re.match is
	 * anchored at the start: "re:down_proj" alone would match nothing) */
	qconfig_refused(dst, CT_QC(CT_IGNORE ",\"re:.*experts[.]5[.]down_proj$\",\"re:down_proj\""),
			"leaves linears unquantized ('model.language_model.layers.0.mlp.experts.5.down_proj', 'model.language_model.layers.1.mlp.experts.5.down_proj'",
			"(4 in all)");
	/* a bad pattern is named */
	qconfig_refused(dst, CT_QC(CT_IGNORE ",\"re:(\""), "'ignore' entry 're:(': not a regular expression", NULL);
	/* a class name other than Linear: the modules it may cover are not
	 * cross-checked, the rest are */
	set_qconfig(dst, CT_QC(CT_IGNORE ",\"Qwen3_5MoeSparseMoeBlock\""), NULL);
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	qc = cJSON_GetObjectItem(gate(&o, "weights"), "quant_config");
	ck_assert_int_gt(cJSON_GetObjectItem(qc, "n_undecided")->valueint, 0);
	pack_out_free(&o);
	/* another method: not cross-checked, said so */
	set_qconfig(dst, "{\"quant_method\":\"fp8\"}", NULL);
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
	qc = cJSON_GetObjectItem(gate(&o, "weights"), "quant_config");
	ck_assert_str_eq(cJSON_GetObjectItem(qc, "kind")->valuestring, "not cross-checked");
	ck_assert_str_eq(cJSON_GetObjectItem(qc, "why")->valuestring, "quant_method 'fp8'");
	pack_out_free(&o);

	write_nvfp4(p, NV_NAN_SCALE);
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", "'model.language_model.layers.2.mlp.experts.3.up_proj.weight_global_scale': scale nan is not finite and > 0");
	pack_out_free(&o);

	write_nvfp4(p, NV_NO_GLOBAL);
	o = run_pack(TINY_MM_F32, dst, NULL);
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", "missing tensor scale 'model.language_model.layers.2.mlp.experts.3.up_proj.weight_global_scale'");
	pack_out_free(&o);

	write_nvfp4(p, NV_BAD_BLOCK);
	o = run_pack(TINY_MM_F32, dst, NULL); /* block scales only read with --scan-scales */
	ck_assert_int_eq(o.status, 0);
	pack_out_free(&o);
	o = run_pack(TINY_MM_F32, dst, "--scan-scales");
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "weights", "up_proj.weight_scale': block scale 5 is NaN (0x7f)");
	pack_out_free(&o);
	free(p);
	rm_target(dst);
}
END_TEST

/* Every problem is listed, not just the first. */
START_TEST(test_lists_every_problem)
{
	char *dst = target_from(TINY_TEXT_F32, true);
	char *s3 = lynn_path_join(dst, "model-00003-of-00006.safetensors");
	char *cfg = lynn_path_join(dst, "generation_config.json");
	struct pack_out o;
	unlink(s3);
	unlink(cfg);
	o = run_pack(FIXTURES "/lora-tiny", dst, NULL); /* a source without the file */
	ck_assert_int_eq(o.status, 1);
	ASSERT_REASON(o, "files", "missing generation_config.json");
	ASSERT_REASON(o, "files", "missing shard model-00003-of-00006.safetensors");
	ASSERT_REASON(o, "weights", "which is missing");
	pack_out_free(&o);
	free(s3);
	free(cfg);
	rm_target(dst);
}
END_TEST

START_TEST(test_read_only_target)
{
	char *dst = target_from(TINY, false), *probe = lynn_path_join(dst, "probe");
	char cmd[600];
	struct tu_run r;
	FILE *fp;

	snprintf(cmd, sizeof cmd, "chmod 555 '%s'; chattr +i '%s' 2>/dev/null; true", dst, dst);
	r = tu_sh(cmd, NULL);
	tu_run_free(&r);
	fp = fopen(probe, "w");
	if (fp) { /* root without chattr: the folder cannot be made read-only here */
		fclose(fp);
		unlink(probe);
		fprintf(stderr, "check_pack: read-only target not testable here (skipped)\n");
	} else {
		char *args;
		ck_assert(asprintf(&args, "pack '%s' '%s'", TINY, dst) > 0);
		r = tu_lynn(args, NULL, NULL);
		ck_assert_int_eq(r.status, 3);
		ck_assert_ptr_nonnull(strstr(r.err, "cannot write into"));
		ck_assert_ptr_nonnull(strstr(r.err, dst));
		tu_run_free(&r);
		free(args);
	}
	snprintf(cmd, sizeof cmd, "chattr -i '%s' 2>/dev/null; chmod 755 '%s'", dst, dst);
	r = tu_sh(cmd, NULL);
	tu_run_free(&r);
	free(probe);
	rm_target(dst);
}
END_TEST

START_TEST(test_usage_and_report)
{
	char *dst = target_from(TINY, true), *rep = lynn_path_join(dst, "pack-report.json"), *args;
	struct tu_run r = tu_lynn("pack " TINY, NULL, NULL);
	struct lynn_err e;
	cJSON *j;

	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("pack /nonexistent/a " TINY, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "/nonexistent/a"));
	tu_run_free(&r);
	r = tu_lynn("pack " TINY " " TINY, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("pack --bogus " TINY " " TINY, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	ck_assert(asprintf(&args, "pack '%s' '%s' --report '%s'", TINY, dst, rep) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "\xe2\x9c\x93 gate 1 files"));
	ck_assert_ptr_nonnull(strstr(r.out, "\xe2\x9c\x93 gate 3 weights"));
	ck_assert_ptr_nonnull(strstr(r.out, "PASS"));
	tu_run_free(&r);
	j = lynn_json_load(rep, 1 << 20, &e);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "schema_version")->valuestring, "lynn-pack-v1");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "pass")));
	cJSON_Delete(j);
	free(args);
	free(rep);
	rm_target(dst);
}
END_TEST

Suite *pack_suite(void)
{
	Suite *s = suite_create("pack");
	TCase *tc = tcase_create("pack");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_complete_bf16);
	tcase_add_test(tc, test_copies_missing_files);
	tcase_add_test(tc, test_dry_run_changes_nothing);
	tcase_add_test(tc, test_missing_config);
	tcase_add_test(tc, test_bad_tokenizer);
	tcase_add_test(tc, test_bad_template);
	tcase_add_test(tc, test_index_missing_shard);
	tcase_add_test(tc, test_tensor_missing_from_shard);
	tcase_add_test(tc, test_shard_tensor_not_in_index);
	tcase_add_test(tc, test_write_index_from_nothing);
	tcase_add_test(tc, test_missing_expert);
	tcase_add_test(tc, test_wrong_shape);
	tcase_add_test(tc, test_nvfp4);
	tcase_add_test(tc, test_lists_every_problem);
	tcase_add_test(tc, test_read_only_target);
	tcase_add_test(tc, test_usage_and_report);
	suite_add_tcase(s, tc);
	return s;
}
