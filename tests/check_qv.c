/* check_qv.c - `lynn quant-verify` (SPEC §6):
 *   - similarity values equal sacreBLEU chrF / chrF++ and Google rouge-score
 *     ROUGE-L on the ASCII pairs of the score fixtures (oracle values from
 *     tests/tools/gen_score_fixtures.py; no new oracle runs), offline mode;
 *   - in-process on the tiny checkpoints: a variant holding the reference's
 *     weights scores 1.0 and passes; copies with the routed experts scaled
 *     x8 or one layer zeroed (written with the st writer) fail with reasons;
 *     unloadable variants are LOAD_FAIL while the others still run;
 *   - endpoints (a scripted OpenAI-compatible server in the test): the
 *     request contract, PASS / FAIL / LOAD_FAIL per endpoint;
 *   - the quality rules on a table of texts, garbage outputs (offline);
 *   - bad arguments and files: exit 2 with the file/field named. */
#include <check.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/quant_verify.h"
#include "lynn/st.h"
#include "testutil.h"

/* chrF and ROUGE-L come from score.h, which check_score holds to 1e-9 of
 * the oracles; the report carries them through JSON with 17 significant
 * digits, so the same bound applies. */
#define TOL_CHRF 1e-9
#define TOL_ROUGE 1e-9
/* The composite is 0.5*chrF/100 + 0.5*F: two more roundings. */
#define TOL_SIM 1e-9

#define TINY FIXTURES "/qwen35moe-tiny"
#define TINY_F32 FIXTURES "/qwen35moe-tiny-text-f32"

/* Prompts on which the tiny random-weight model's first 6 greedy tokens
 * happen to decode to text that passes the quality rules (its usual output
 * is byte soup, which no coherence check should accept). They make a
 * PASS possible; what is tested is that identical weights give identical
 * outputs (similarity 1.0) and corrupted weights do not. */
static const char CLEAN_PROMPTS[] =
	"{\"id\": \"a\", \"prompt\": \"value gate gate\"}\n"
	"{\"id\": \"b\", \"prompt\": \"query of number\"}\n"
	"{\"id\": \"c\", \"prompt\": \"是天么家在\"}\n";
#define CLEAN_MAX_TOKENS "6"

static cJSON **load_jsonl(const char *path, size_t *n)
{
	size_t len;
	char *text = tu_read(path, &len), *p, *nl;
	cJSON **v = NULL;
	size_t cap = 0;
	ck_assert_msg(text, "cannot read %s", path);
	*n = 0;
	for (p = text; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p);
		if (nl > p) {
			if (*n == cap) {
				cap = cap ? cap * 2 : 256;
				v = realloc(v, cap * sizeof(*v));
			}
			v[*n] = cJSON_ParseWithLength(p, (size_t)(nl - p));
			ck_assert(v[*n]);
			(*n)++;
		}
		if (!*nl)
			break;
	}
	free(text);
	return v;
}

static const char *str(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	ck_assert_msg(s, "field %s is not a string", k);
	return s;
}

static cJSON *variant(const cJSON *rep, const char *label)
{
	const cJSON *v;
	cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(rep, "variants"))
		if (!strcmp(str(v, "label"), label))
			return (cJSON *)v;
	ck_abort_msg("no variant %s in the report", label);
	return NULL;
}

/* Run quant-verify with --json; check the exit status; return the report. */
static cJSON *qv_json(const char *args, int want_status)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "-q quant-verify --json --threads 2 %s", args);
	struct tu_run r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == want_status, "exit %d (want %d) for %s\nstderr: %s", r.status,
		      want_status, args, r.err);
	cJSON *rep = cJSON_Parse(r.out);
	ck_assert_msg(rep, "stdout is not JSON: %.300s", r.out);
	ck_assert_str_eq(cJSON_GetArrayItem(rep, 0)->string, "schema_version");
	ck_assert_str_eq(str(rep, "schema_version"), LYNN_QV_SCHEMA);
	tu_run_free(&r);
	return rep;
}

/* ===== similarity = the oracles ===== */

START_TEST(test_similarity_oracles)
{
	size_t nc, ne;
	cJSON **corp = load_jsonl(FIXTURES "/score/corpus.jsonl", &nc);
	cJSON **exp = load_jsonl(FIXTURES "/score/expected.jsonl", &ne);
	char *dir = tu_mkdtemp(), *ref = lynn_path_join(dir, "ref.jsonl"),
	     *hyp = lynn_path_join(dir, "hyp.jsonl");
	FILE *fr = fopen(ref, "w"), *fh = fopen(hyp, "w");
	size_t n_ascii = 0;
	ck_assert_uint_eq(nc, ne);
	for (size_t i = 0; i < nc; i++) {
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(exp[i], "ascii")))
			continue;
		cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
		cJSON_AddNumberToObject(a, "id", tu_num(corp[i], "id"));
		cJSON_AddStringToObject(a, "output", str(corp[i], "ref"));
		cJSON_AddNumberToObject(b, "id", tu_num(corp[i], "id"));
		cJSON_AddStringToObject(b, "output", str(corp[i], "hyp"));
		char *sa = cJSON_PrintUnformatted(a), *sb = cJSON_PrintUnformatted(b);
		fprintf(fr, "%s\n", sa);
		fprintf(fh, "%s\n", sb);
		free(sa);
		free(sb);
		cJSON_Delete(a);
		cJSON_Delete(b);
		n_ascii++;
	}
	fclose(fr);
	fclose(fh);
	ck_assert_uint_ge(n_ascii, 100);
	for (int pp = 0; pp < 2; pp++) {
		char args[1024];
		snprintf(args, sizeof(args), "--reference-outputs '%s' --variant-outputs 'v=%s'%s", ref,
			 hyp, pp ? " --chrf-word-order 2" : "");
		cJSON *rep = qv_json(args, 1), *it;
		cJSON *v = variant(rep, "v");
		ck_assert_str_eq(str(rep, "mode"), "offline");
		ck_assert_int_eq((int)tu_num(v, "n_items"), (int)n_ascii);
		size_t k = 0;
		double sum = 0;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(v, "items")) {
			long id = strtol(str(it, "id"), NULL, 10);
			const cJSON *e = exp[id];
			ck_assert_int_eq((int)tu_num(e, "id"), (int)id);
			double chrf = tu_num(e, pp ? "chrfpp" : "chrf");
			double rl = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "rougeL"), 2)->valuedouble;
			ck_assert_msg(fabs(tu_num(it, "chrf") - chrf) <= TOL_CHRF, "id %ld chrF %.17g vs %.17g",
				      id, tu_num(it, "chrf"), chrf);
			ck_assert_msg(fabs(tu_num(it, "rouge_l") - rl) <= TOL_ROUGE, "id %ld ROUGE-L %.17g vs %.17g",
				      id, tu_num(it, "rouge_l"), rl);
			ck_assert_msg(fabs(tu_num(it, "similarity") - (0.5 * chrf / 100 + 0.5 * rl)) <= TOL_SIM,
				      "id %ld similarity", id);
			sum += tu_num(it, "similarity");
			k++;
		}
		ck_assert_uint_eq(k, n_ascii);
		ck_assert(fabs(tu_num(v, "mean_similarity") - sum / (double)k) <= TOL_SIM);
		cJSON_Delete(rep);
	}
	for (size_t i = 0; i < nc; i++) {
		cJSON_Delete(corp[i]);
		cJSON_Delete(exp[i]);
	}
	free(corp);
	free(exp);
	lynn_rm_rf(dir);
	free(ref);
	free(hyp);
	free(dir);
}
END_TEST

/* ===== quality rules ===== */

struct qcase {
	const char *text;
	const char *anchors[3];
	unsigned fails; /* bit per enum lynn_qv_check */
};
#define F(c) (1u << (c))

static const struct qcase QCASES[] = {
	{ "The capital of France is Paris.", { "paris" }, 0 },
	{ "中国的首都是北京,它是一座历史悠久的城市。", { "北京", "Beijing" }, 0 },
	{ "def add(xs):\n        return sum(xs)  # 8-space indent is fine", { NULL }, 0 },
	{ "| a | b |\n|---|---|---|---|\n| 1 | 2 |", { NULL }, 0 },
	{ "One million is written 1000000 in digits.", { NULL }, 0 },
	{ "Nope.", { NULL }, F(LYNN_QV_TOO_SHORT) },
	{ "   short \n\n ", { NULL }, F(LYNN_QV_TOO_SHORT) },
	{ "This answer does not say the city at all.", { "Paris" }, F(LYNN_QV_MISSING_ANCHOR) },
	/* 2 Cyrillic letters in 100+ characters: at most 2 and 3% */
	{ "Most of this sentence is English and only two letters are Cyrillic: Дж. The rest is plain "
	  "ASCII text here.", { NULL }, 0 },
	{ "Three Cyrillic letters: Джо, in a long enough sentence of plain ASCII text to stay under "
	  "three percent of all.", { NULL }, F(LYNN_QV_UNEXPECTED_SCRIPT) },
	{ "One bad byte \xff in a short line", { NULL }, F(LYNN_QV_UNEXPECTED_SCRIPT) },
	{ "これはひらがなとカタカナだけの文章ですよね", { NULL },
	  F(LYNN_QV_UNEXPECTED_SCRIPT) | F(LYNN_QV_UNREADABLE) },
	{ "\U0001F600\U0001F600\U0001F601\U0001F602\U0001F603 ok \U0001F604\U0001F605", { NULL },
	  F(LYNN_QV_UNREADABLE) },
	{ "we go lalala to the shop", { NULL }, F(LYNN_QV_REPEATED_NGRAM) },
	{ "我们我们我们都是好朋友", { NULL }, F(LYNN_QV_REPEATED_NGRAM) },
	{ "I think that the cat is the cat is the cat is here now", { NULL }, F(LYNN_QV_REPEATED_NGRAM) },
	{ "Wait!!!!!! Something went wrong", { NULL }, F(LYNN_QV_CHAR_RUN_CHECK) },
	{ "The answer is <|im_end|> forty-two", { NULL }, F(LYNN_QV_GIBBERISH) },
	{ "Caf\xc3\x83\xc2\xa9 au lait is mojibake here", { NULL }, F(LYNN_QV_GIBBERISH) },
};

START_TEST(test_quality_rules)
{
	for (size_t i = 0; i < sizeof(QCASES) / sizeof(QCASES[0]); i++) {
		const struct qcase *c = &QCASES[i];
		struct lynn_qv_quality q;
		size_t na = 0;
		while (na < 3 && c->anchors[na])
			na++;
		ck_assert_int_eq(lynn_qv_quality_check(c->text, strlen(c->text), c->anchors, na, false,
						       &q, NULL), 0);
		unsigned got = 0;
		for (int k = 0; k < LYNN_QV_N_CHECKS; k++)
			got |= q.failed[k] ? F(k) : 0;
		ck_assert_msg(got == c->fails, "case %zu \"%s\": failed 0x%x, want 0x%x", i, c->text, got,
			      c->fails);
		ck_assert(q.pass == (c->fails == 0));
	}
	/* NaN/Inf logits and a missing output always fail */
	struct lynn_qv_quality q;
	ck_assert_int_eq(lynn_qv_quality_check("A perfectly fine answer.", 24, NULL, 0, true, &q, NULL), 0);
	ck_assert(!q.pass && q.failed[LYNN_QV_NONFINITE_LOGITS]);
	ck_assert_int_eq(lynn_qv_quality_check(NULL, 0, NULL, 0, false, &q, NULL), 0);
	ck_assert(!q.pass && q.failed[LYNN_QV_NO_OUTPUT]);
	/* every built-in prompt has anchors */
	struct lynn_qv_prompts p;
	ck_assert_int_eq(lynn_qv_prompts_builtin(&p, NULL), 0);
	ck_assert_uint_eq(p.n, 6);
	for (size_t i = 0; i < p.n; i++)
		ck_assert_uint_gt(p.items[i].n_anchors, 0);
	lynn_qv_prompts_release(&p);
}
END_TEST

/* Garbage outputs fail quality (offline), a copy of the reference passes. */
START_TEST(test_garbage_offline)
{
	char *dir = tu_mkdtemp(), *ref = lynn_path_join(dir, "ref.jsonl"),
	     *bad = lynn_path_join(dir, "bad.jsonl"), *args;
	const char *good =
		"{\"id\": \"en_capital\", \"output\": \"The capital of France is Paris.\"}\n"
		"{\"id\": \"zh_capital\", \"output\": \"中国的首都是北京。\"}\n"
		"{\"id\": 3, \"output\": \"Light scatters off air molecules, so blue dominates.\"}\n";
	const char *garbage =
		"{\"id\": \"en_capital\", \"output\": \"The capital Париж Париж Париж of France is Paris.\"}\n"
		"{\"id\": \"zh_capital\", \"output\": \"北京北京北京的的的的的的的\"}\n"
		"{\"id\": 3, \"output\": \"Light scatters off \xef\xbf\xbd\xef\xbf\xbd<|endoftext|> blue\"}\n";
	tu_write(ref, good, strlen(good));
	tu_write(bad, garbage, strlen(garbage));
	ck_assert(asprintf(&args, "--reference-outputs '%s' --variant-outputs 'same=%s' "
			   "--variant-outputs 'garbage=%s'", ref, ref, bad) > 0);
	cJSON *rep = qv_json(args, 1), *it;
	cJSON *same = variant(rep, "same"), *g = variant(rep, "garbage");
	ck_assert_str_eq(str(same, "verdict"), "PASS");
	ck_assert(tu_num(same, "mean_similarity") == 1.0);
	ck_assert_str_eq(str(g, "verdict"), "FAIL");
	ck_assert_int_eq((int)tu_num(g, "n_coherent"), 0);
	ck_assert_int_gt(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "reasons")), 0);
	/* the built-in prompts' anchors apply to outputs with their ids */
	char *all = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(g, "items"));
	ck_assert_ptr_nonnull(strstr(all, "unexpected_script"));
	ck_assert_ptr_nonnull(strstr(all, "repeated_ngram"));
	ck_assert_ptr_nonnull(strstr(all, "char_run"));
	ck_assert_ptr_nonnull(strstr(all, "gibberish"));
	free(all);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(same, "items")) {
		cJSON *q = cJSON_GetObjectItemCaseSensitive(it, "quality");
		const char *id = str(it, "id");
		ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "pass")));
		cJSON *ah = cJSON_GetObjectItemCaseSensitive(q, "anchor_hit");
		ck_assert(strcmp(id, "3") ? cJSON_IsTrue(ah) : cJSON_IsNull(ah));
	}
	cJSON_Delete(rep);
	/* the Markdown table */
	free(args);
	ck_assert(asprintf(&args, "-q quant-verify --reference-outputs '%s' --variant-outputs 'same=%s' "
			   "--variant-outputs 'garbage=%s'", ref, ref, bad) > 0);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.out, "| same | PASS | 1.0000 | 3/3 |"));
	ck_assert_ptr_nonnull(strstr(r.out, "| garbage | FAIL |"));
	tu_run_free(&r);
	free(args);
	lynn_rm_rf(dir);
	free(ref);
	free(bad);
	free(dir);
}
END_TEST

/* ===== in-process on the tiny checkpoints ===== */

enum corrupt { SCALE_EXPERTS, ZERO_LAYER, NAN_NORM };

/* Copy the text-only f32 checkpoint into dst with the routed experts
 * scaled x8, every weight of layer 1 zeroed, or the final norm NaN. */
static void write_corrupted(const char *dst, enum corrupt how)
{
	static const char *files[] = { "config.json", "generation_config.json", "tokenizer.json",
				       "tokenizer_config.json", "chat_template.jinja" };
	struct lynn_err err = { 0 };
	struct lynn_ckpt *c = lynn_ckpt_open(TINY_F32, &err);
	ck_assert_msg(c, "%s", err.msg);
	struct lynn_st_writer *w = lynn_st_writer_create(dst, 0, &err);
	ck_assert_msg(w, "%s", err.msg);
	int64_t n = lynn_ckpt_n_tensors(c), n_changed = 0;
	for (int64_t i = 0; i < n; i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		ck_assert_int_eq(lynn_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, &err), 0);
	}
	for (int64_t i = 0; i < n; i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		float *x = malloc(t->nbytes ? t->nbytes : 1);
		memcpy(x, t->data, t->nbytes);
		bool change = how == SCALE_EXPERTS ? lynn_tensor_is_routed_expert(t->name)
			      : how == ZERO_LAYER  ? strstr(t->name, "layers.1.") != NULL
						   : !strcmp(t->name, "model.norm.weight");
		if (change) {
			ck_assert_int_eq(t->dtype, LYNN_DTYPE_F32);
			for (int64_t k = 0; k < t->n_elems; k++)
				x[k] = how == SCALE_EXPERTS ? x[k] * 8.0f : how == ZERO_LAYER ? 0.0f : NAN;
			n_changed++;
		}
		ck_assert_int_eq(lynn_st_writer_write(w, x, t->nbytes, &err), 0);
		free(x);
	}
	ck_assert_msg(lynn_st_writer_finish(w, &err) == 0, "%s", err.msg);
	ck_assert_int_gt(n_changed, 0);
	lynn_st_writer_free(w);
	lynn_ckpt_close(c);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *s = lynn_path_join(TINY_F32, files[i]), *d = lynn_path_join(dst, files[i]);
		ck_assert_int_eq(lynn_file_copy(s, d, NULL), 0);
		free(s);
		free(d);
	}
}

START_TEST(test_identity_passes)
{
	char *dir = tu_mkdtemp(), *pr = lynn_path_join(dir, "prompts.jsonl"),
	     *od = lynn_path_join(dir, "out"), *args;
	tu_write(pr, CLEAN_PROMPTS, strlen(CLEAN_PROMPTS));
	ck_assert(asprintf(&args, "--reference %s --variant same=%s --prompts '%s' --max-tokens "
			   CLEAN_MAX_TOKENS " --out-dir '%s'", TINY, TINY_F32, pr, od) > 0);
	cJSON *rep = qv_json(args, 0), *it;
	cJSON *v = variant(rep, "same");
	ck_assert_str_eq(str(rep, "verdict"), "PASS");
	ck_assert_str_eq(str(v, "verdict"), "PASS");
	ck_assert_str_eq(str(v, "source"), "folder");
	ck_assert(tu_num(v, "mean_similarity") == 1.0);
	ck_assert_int_eq((int)tu_num(v, "n_coherent"), 3);
	ck_assert(tu_num(v, "avg_tokens_per_sec") > 0 && tu_num(v, "load_time_s") >= 0);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(v, "items")) {
		ck_assert(tu_num(it, "similarity") == 1.0);
		ck_assert(tu_num(it, "chrf") == 100.0 && tu_num(it, "rouge_l") == 1.0);
		ck_assert_int_eq((int)tu_num(it, "tokens"), 6);
	}
	cJSON_Delete(rep);
	/* the out-dir holds the report, the table and outputs the offline mode reads back */
	static const char *want[] = { "report.json", "report.md", "reference.outputs.jsonl",
				      "same.outputs.jsonl" };
	for (size_t i = 0; i < 4; i++) {
		char *p = lynn_path_join(od, want[i]);
		ck_assert_msg(lynn_file_exists(p), "%s missing", p);
		free(p);
	}
	free(args);
	ck_assert(asprintf(&args, "--reference-outputs '%s/reference.outputs.jsonl' --variant-outputs "
			   "'same=%s/same.outputs.jsonl' --prompts '%s'", od, od, pr) > 0);
	rep = qv_json(args, 0);
	ck_assert(tu_num(variant(rep, "same"), "mean_similarity") == 1.0);
	cJSON_Delete(rep);
	/* a non-empty out-dir is refused without --force */
	free(args);
	ck_assert(asprintf(&args, "-q quant-verify --reference %s --variant same=%s --out-dir '%s'",
			   TINY, TINY_F32, od) > 0);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "not empty"));
	tu_run_free(&r);
	free(args);
	lynn_rm_rf(dir);
	free(pr);
	free(od);
	free(dir);
}
END_TEST

START_TEST(test_corrupted_fail)
{
	char *dir = tu_mkdtemp(), *pr = lynn_path_join(dir, "prompts.jsonl"),
	     *x8 = lynn_path_join(dir, "experts_x8"), *z = lynn_path_join(dir, "layer1_zero"),
	     *nan = lynn_path_join(dir, "norm_nan"), *args;
	tu_write(pr, CLEAN_PROMPTS, strlen(CLEAN_PROMPTS));
	write_corrupted(x8, SCALE_EXPERTS);
	write_corrupted(z, ZERO_LAYER);
	write_corrupted(nan, NAN_NORM);
	ck_assert(asprintf(&args, "--reference %s --variant x8='%s' --variant zero='%s' --variant nan='%s' "
			   "--prompts '%s' --max-tokens " CLEAN_MAX_TOKENS, TINY, x8, z, nan, pr) > 0);
	cJSON *rep = qv_json(args, 1);
	ck_assert_str_eq(str(rep, "verdict"), "FAIL");
	const char *labels[] = { "x8", "zero" };
	for (int i = 0; i < 2; i++) {
		cJSON *v = variant(rep, labels[i]);
		ck_assert_str_eq(str(v, "verdict"), "FAIL");
		ck_assert(tu_num(v, "mean_similarity") < LYNN_QV_DEFAULT_MIN_SIMILARITY);
		cJSON *rs = cJSON_GetObjectItemCaseSensitive(v, "reasons");
		ck_assert_int_gt(cJSON_GetArraySize(rs), 0);
		ck_assert_ptr_nonnull(strstr(cJSON_GetStringValue(cJSON_GetArrayItem(rs, 0)),
					     "mean_similarity"));
	}
	/* NaN logits: every answer fails quality with nonfinite_logits */
	cJSON *v = variant(rep, "nan"), *it;
	ck_assert_str_eq(str(v, "verdict"), "FAIL");
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(v, "items")) {
		char *q = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "quality"));
		ck_assert_msg(strstr(q, "nonfinite_logits"), "%s", q);
		free(q);
	}
	cJSON_Delete(rep);
	free(args);
	lynn_rm_rf(dir);
	free(pr);
	free(x8);
	free(z);
	free(nan);
	free(dir);
}
END_TEST

START_TEST(test_load_fail_others_run)
{
	char *dir = tu_mkdtemp(), *pr = lynn_path_join(dir, "prompts.jsonl"),
	     *broken = lynn_path_join(dir, "broken"), *cfg, *args;
	tu_write(pr, CLEAN_PROMPTS, strlen(CLEAN_PROMPTS));
	ck_assert_int_eq(mkdir(broken, 0755), 0);
	cfg = lynn_path_join(broken, "config.json");
	tu_write(cfg, "{\"model_type\": ", 15);
	ck_assert(asprintf(&args, "--reference %s --variant missing='%s/nope' --variant broken='%s' "
			   "--variant gguf='%s/model-Q4_K_M.gguf' --variant same=%s --prompts '%s' "
			   "--max-tokens " CLEAN_MAX_TOKENS, TINY, dir, broken, dir, TINY_F32, pr) > 0);
	cJSON *rep = qv_json(args, 1);
	const char *lf[] = { "missing", "broken", "gguf" };
	for (int i = 0; i < 3; i++) {
		cJSON *v = variant(rep, lf[i]);
		ck_assert_str_eq(str(v, "verdict"), "LOAD_FAIL");
		ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "mean_similarity")));
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(v, "reasons")), 1);
	}
	const char *why = cJSON_GetStringValue(
		cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(variant(rep, "gguf"), "reasons"), 0));
	ck_assert_ptr_nonnull(strstr(why, "GGUF file"));
	ck_assert_ptr_nonnull(strstr(why, "not found"));
	ck_assert_str_eq(str(variant(rep, "same"), "verdict"), "PASS");
	ck_assert_int_eq((int)tu_num(rep, "n_pass"), 1);
	cJSON_Delete(rep);
	free(args);
	lynn_rm_rf(dir);
	free(pr);
	free(cfg);
	free(broken);
	free(dir);
}
END_TEST

/* ===== endpoints: a scripted OpenAI-compatible server ===== */

/* URL prefix /good/v1: an answer holding the prompt's anchors, after a
 * <think> block the client moves out; /bad/v1: looping Cyrillic. Requests
 * that break the contract (temperature 0, thinking off, max_tokens) get 400. */
struct fake {
	struct MHD_Daemon *d;
	int port;
	int want_max_tokens;
	struct lynn_qv_prompts builtin;
	pthread_mutex_t mu;
	int n_posts;
};

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct fake *f = cls;
	struct lynn_buf *body = *con_cls;
	bool good = !strncmp(url, "/good/", 6);
	(void)version;
	if (!good && strncmp(url, "/bad/", 5))
		return tu_http_reply(c, 404, "{\"error\":{\"message\":\"not found\"}}");
	url = strchr(url + 1, '/');
	if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
		return tu_http_reply(c, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\"}]}");
	if (strcmp(method, "POST") || strcmp(url, "/v1/chat/completions"))
		return tu_http_reply(c, 404, "{\"error\":{\"message\":\"not found\"}}");
	if (!body) {
		*con_cls = calloc(1, sizeof(struct lynn_buf));
		return MHD_YES;
	}
	if (*upload_size) {
		lynn_buf_append(body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	cJSON *req = cJSON_Parse(body->data ? body->data : "");
	const cJSON *msgs = cJSON_GetObjectItem(req, "messages");
	const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content"));
	const cJSON *t = cJSON_GetObjectItem(req, "temperature");
	const cJSON *kw = cJSON_GetObjectItem(req, "chat_template_kwargs");
	int mt = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(req, "max_tokens"));
	pthread_mutex_lock(&f->mu);
	f->n_posts++;
	pthread_mutex_unlock(&f->mu);
	if (!prompt || !cJSON_IsNumber(t) || t->valuedouble != 0 ||
	    !cJSON_IsFalse(cJSON_GetObjectItem(kw, "enable_thinking")) || mt != f->want_max_tokens) {
		cJSON_Delete(req);
		return tu_http_reply(c, 400, "{\"error\":{\"message\":\"contract broken\"}}");
	}
	struct lynn_buf ans = LYNN_BUF_INIT;
	if (good) {
		lynn_buf_puts(&ans, "<think>\nquick\n</think>\n\nThe answer: ");
		for (size_t i = 0; i < f->builtin.n; i++)
			if (!strcmp(f->builtin.items[i].prompt, prompt))
				for (size_t k = 0; k < f->builtin.items[i].n_anchors; k++)
					lynn_buf_printf(&ans, "%s%s", k ? ", " : "", f->builtin.items[i].anchors[k]);
		lynn_buf_puts(&ans, ".");
	} else {
		lynn_buf_puts(&ans, "Ответ Ответ Ответ Ответ");
	}
	cJSON_Delete(req);
	cJSON *r = cJSON_CreateObject(), *ch = cJSON_AddArrayToObject(r, "choices"), *c0 = cJSON_CreateObject();
	cJSON_AddItemToArray(ch, c0);
	cJSON *m = cJSON_AddObjectToObject(c0, "message");
	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON_AddStringToObject(m, "content", ans.data);
	cJSON_AddStringToObject(c0, "finish_reason", "stop");
	char *s = cJSON_PrintUnformatted(r);
	enum MHD_Result ret = tu_http_reply(c, 200, s);
	free(s);
	cJSON_Delete(r);
	lynn_buf_release(&ans);
	return ret;
}

START_TEST(test_endpoints)
{
	struct fake f = { 0 };
	char *args;
	pthread_mutex_init(&f.mu, NULL);
	f.want_max_tokens = 40;
	ck_assert_int_eq(lynn_qv_prompts_builtin(&f.builtin, NULL), 0);
	f.d = tu_http_start(handle, &f, &f.port);
	int p = f.port;
	ck_assert(asprintf(&args, "--reference http://127.0.0.1:%d/good/v1 --variant "
			   "same=http://127.0.0.1:%d/good/v1,http://127.0.0.1:%d/good/v1 --variant "
			   "bad=http://127.0.0.1:%d/bad/v1 --variant dead=http://127.0.0.1:%d/v1 "
			   "--max-tokens 40 --retries 0 --timeout 10 --concurrency 3",
			   p, p, p, p, tu_dead_port()) > 0);
	cJSON *rep = qv_json(args, 1), *it;
	cJSON *same = variant(rep, "same");
	ck_assert_str_eq(str(same, "verdict"), "PASS");
	ck_assert_str_eq(str(same, "source"), "endpoint");
	ck_assert(tu_num(same, "mean_similarity") == 1.0);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(same, "avg_tokens_per_sec")));
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(same, "items")) {
		ck_assert_ptr_null(strstr(str(it, "output"), "think"));
		ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(it, "quality"), "anchor_hit")));
	}
	cJSON *bad = variant(rep, "bad");
	ck_assert_str_eq(str(bad, "verdict"), "FAIL");
	ck_assert_int_eq((int)tu_num(bad, "n_coherent"), 0);
	ck_assert_str_eq(str(variant(rep, "dead"), "verdict"), "LOAD_FAIL");
	ck_assert_int_eq(f.n_posts, 6 * 3);
	cJSON_Delete(rep);
	free(args);
	MHD_stop_daemon(f.d);
	lynn_qv_prompts_release(&f.builtin);
	pthread_mutex_destroy(&f.mu);
}
END_TEST

/* ===== bad arguments and files ===== */

struct bad {
	const char *args;   /* %1$s = temp dir */
	const char *needle; /* in stderr */
};

START_TEST(test_bad_input)
{
	char *dir = tu_mkdtemp();
	struct {
		const char *name, *text;
	} files[] = {
		{ "ok.jsonl", "{\"id\": \"a\", \"output\": \"The capital of France is Paris.\"}\n" },
		{ "badjson.jsonl", "{\"id\": \"a\", \"output\": \"x\"}\n{\"id\": \"b\", \n" },
		{ "noout.jsonl", "{\"id\": \"a\"}\n" },
		{ "noid.jsonl", "{\"output\": \"x\"}\n" },
		{ "dupid.jsonl", "{\"id\": 1, \"output\": \"x\"}\n{\"id\": \"1\", \"output\": \"y\"}\n" },
		{ "floatid.jsonl", "{\"id\": 1.5, \"output\": \"x\"}\n" },
		{ "empty.jsonl", "\n  \n" },
		{ "p_noprompt.jsonl", "{\"id\": \"a\", \"anchors\": [\"x\"]}\n" },
		{ "p_anchors.jsonl", "{\"prompt\": \"hi\", \"anchors\": \"x\"}\n" },
		{ "p_anchor_num.jsonl", "{\"prompt\": \"hi\", \"anchors\": [\"x\", 3]}\n" },
		{ "p_array.jsonl", "[1, 2]\n" },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *p = lynn_path_join(dir, files[i].name);
		tu_write(p, files[i].text, strlen(files[i].text));
		free(p);
	}
	static const struct bad cases[] = {
		{ "", "--reference" },
		{ "--reference " TINY, "--variant" },
		{ "--variant a=" TINY, "--reference" },
		{ "--reference " TINY " --variant " TINY, "LABEL=PATH" },
		{ "--reference " TINY " --variant =" TINY, "LABEL=PATH" },
		{ "--reference " TINY " --variant a=", "LABEL=PATH" },
		{ "--reference " TINY " --variant a=" TINY " --variant a=" TINY, "given twice" },
		{ "--reference " TINY " --variant reference=" TINY, "clashes with 'reference'" },
		{ "--reference " TINY " --variant a/b=" TINY " --variant a_b=" TINY, "clashes with 'a/b'" },
		{ "--reference " TINY " --variant a=" TINY " --max-tokens 0", "--max-tokens" },
		{ "--reference " TINY " --variant a=" TINY " --max-tokens x", "--max-tokens" },
		{ "--reference " TINY " --variant a=" TINY " --min-similarity 1.5", "--min-similarity" },
		{ "--reference " TINY " --variant a=" TINY " --min-similarity nan", "--min-similarity" },
		{ "--reference " TINY " --variant a=" TINY " --chrf-word-order 9", "--chrf-word-order" },
		{ "--reference " TINY " --variant a=" TINY " --bogus", "unknown option" },
		{ "--reference " TINY " --variant a=" TINY " extra", "unexpected argument" },
		{ "--reference " TINY " --variant-outputs a=%1$s/ok.jsonl", "cannot be mixed" },
		{ "--variant-outputs a=%1$s/ok.jsonl", "--reference-outputs" },
		{ "--reference-outputs %1$s/ok.jsonl", "--variant-outputs" },
		{ "--reference %1$s/none --variant a=" TINY, "not found" },
		{ "--reference %1$s/m.gguf --variant a=" TINY, "GGUF" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/none.jsonl", "none.jsonl" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/p_noprompt.jsonl",
		  "p_noprompt.jsonl' line 1: field 'prompt'" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/p_anchors.jsonl",
		  "line 1: field 'anchors'" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/p_anchor_num.jsonl",
		  "line 1: anchors[1]" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/p_array.jsonl",
		  "line 1: not a JSON object" },
		{ "--reference " TINY " --variant a=" TINY " --prompts %1$s/empty.jsonl", "no records" },
		{ "--reference-outputs %1$s/badjson.jsonl --variant-outputs a=%1$s/ok.jsonl",
		  "badjson.jsonl' line 2" },
		{ "--reference-outputs %1$s/noid.jsonl --variant-outputs a=%1$s/ok.jsonl",
		  "line 1: no field 'id'" },
		{ "--reference-outputs %1$s/dupid.jsonl --variant-outputs a=%1$s/ok.jsonl",
		  "line 2: id '1' repeated" },
		{ "--reference-outputs %1$s/floatid.jsonl --variant-outputs a=%1$s/ok.jsonl",
		  "field 'id' is not a string or an integer" },
		{ "--reference-outputs %1$s/ok.jsonl --variant-outputs a=%1$s/noout.jsonl",
		  "noout.jsonl' line 1: field 'output' is missing" },
		{ "--reference-outputs %1$s/ok.jsonl --variant-outputs a=%1$s/none.jsonl", "not found" },
		{ "--reference-outputs %1$s/none.jsonl --variant-outputs a=%1$s/ok.jsonl", "not found" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char args[1024], full[1200];
		snprintf(args, sizeof(args), cases[i].args, dir);
		snprintf(full, sizeof(full), "quant-verify %s", args);
		struct tu_run r = tu_lynn(full, NULL, NULL);
		ck_assert_msg(r.status == 2, "case %zu (%s): exit %d, stderr %s", i, args, r.status, r.err);
		ck_assert_msg(strstr(r.err, cases[i].needle), "case %zu (%s): stderr lacks '%s': %s", i,
			      args, cases[i].needle, r.err);
		ck_assert_str_eq(r.out, "");
		tu_run_free(&r);
	}
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

Suite *qv_suite(void)
{
	Suite *s = suite_create("qv");
	TCase *u = tcase_create("units"), *m = tcase_create("model");
	tcase_add_test(u, test_quality_rules);
	tcase_add_test(u, test_similarity_oracles);
	tcase_add_test(u, test_garbage_offline);
	tcase_add_test(u, test_bad_input);
	tcase_add_test(u, test_endpoints);
	tcase_set_timeout(u, 120);
	tcase_add_test(m, test_identity_passes);
	tcase_add_test(m, test_corrupted_fail);
	tcase_add_test(m, test_load_fail_others_run);
	tcase_set_timeout(m, 120);
	suite_add_tcase(s, u);
	suite_add_tcase(s, m);
	return s;
}
