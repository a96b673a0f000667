/* check_score.c - src/score against oracles nobody here wrote: sacreBLEU
 * (chrF, chrF++), Google rouge-score (ROUGE-L), Python difflib (sequence
 * ratio) and the original four_gate_eval.py (reference similarity, style
 * rules, tool calls, gold checks), through the committed fixtures of
 * tests/tools/gen_score_fixtures.py; plus `lynn score` and its bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lynn/json.h"
#include "lynn/score.h"
#include "testutil.h"

/* chrF is computed with the same operations as sacreBLEU; 1e-9 (on 0..100)
 * is the bound and leaves room only for a different libm. */
#define TOL_CHRF 1e-9
/* ROUGE-L P/R/F: two integer divisions and one f-measure. */
#define TOL_ROUGE 1e-9
/* difflib ratio: 2M/(|a|+|b|) from the same integer M. */
#define TOL_SEQ 1e-12
/* The toolkit's reported values are rounded to 4 decimals; lynn rounds the
 * same way, so equal up to the last binary digit. */
#define TOL_ROUNDED 1e-12

#define SCORE_FIX FIXTURES "/score"

struct pair {
	cJSON *rec, *exp;
	const char *hyp, *ref, *prompt;
};

static struct pair *pairs;
static size_t n_pairs;
static cJSON *corpus_exp;

static cJSON **load_jsonl(const char *path, size_t *n)
{
	size_t len, cap = 0, cnt = 0;
	char *text = tu_read(path, &len), *line, *save = NULL;
	cJSON **arr = NULL;
	ck_assert_msg(text != NULL, "missing fixture %s (run tests/tools/gen_score_*.py)", path);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (cnt == cap) {
			cap = cap ? cap * 2 : 1024;
			arr = realloc(arr, cap * sizeof *arr);
			ck_assert_ptr_nonnull(arr);
		}
		arr[cnt] = cJSON_Parse(line);
		ck_assert_msg(arr[cnt] != NULL, "%s: bad line %zu", path, cnt + 1);
		cnt++;
	}
	free(text);
	*n = cnt;
	return arr;
}

static void load_fixtures(void)
{
	size_t nc, ne;
	cJSON **c = load_jsonl(SCORE_FIX "/corpus.jsonl", &nc);
	cJSON **e = load_jsonl(SCORE_FIX "/expected.jsonl", &ne);
	char *t;
	ck_assert_uint_eq(nc, ne);
	ck_assert_uint_ge(nc, 1000);
	pairs = calloc(nc, sizeof *pairs);
	for (size_t i = 0; i < nc; i++) {
		pairs[i].rec = c[i];
		pairs[i].exp = e[i];
		pairs[i].hyp = cJSON_GetObjectItem(c[i], "hyp")->valuestring;
		pairs[i].ref = cJSON_GetObjectItem(c[i], "ref")->valuestring;
		pairs[i].prompt = cJSON_GetObjectItem(c[i], "prompt")->valuestring;
		ck_assert_int_eq(cJSON_GetObjectItem(c[i], "id")->valueint,
				 cJSON_GetObjectItem(e[i], "id")->valueint);
	}
	n_pairs = nc;
	free(c);
	free(e);
	t = tu_read(SCORE_FIX "/expected_corpus.json", NULL);
	ck_assert_ptr_nonnull(t);
	corpus_exp = cJSON_Parse(t);
	free(t);
}

static void free_fixtures(void)
{
	for (size_t i = 0; i < n_pairs; i++) {
		cJSON_Delete(pairs[i].rec);
		cJSON_Delete(pairs[i].exp);
	}
	free(pairs);
	pairs = NULL;
	n_pairs = 0;
	cJSON_Delete(corpus_exp);
	corpus_exp = NULL;
}

/* ===== chrF ===== */

START_TEST(test_chrf_corpus_pairs)
{
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT, opp = LYNN_CHRFPP_OPTS_DEFAULT;
	struct lynn_chrf_stats acc = { 0 }, accpp = { 0 };
	double worst = 0;
	for (size_t i = 0; i < n_pairs; i++) {
		struct lynn_chrf_stats st;
		double s, spp;
		const struct pair *p = &pairs[i];
		ck_assert_int_eq(lynn_chrf_stats_compute(ctx, &o, p->hyp, strlen(p->hyp), p->ref,
							 strlen(p->ref), &st, NULL), 0);
		s = lynn_chrf_stats_score(&o, &st);
		lynn_chrf_stats_add(&acc, &st);
		ck_assert_int_eq(lynn_chrf_stats_compute(ctx, &opp, p->hyp, strlen(p->hyp), p->ref,
							 strlen(p->ref), &st, NULL), 0);
		spp = lynn_chrf_stats_score(&opp, &st);
		lynn_chrf_stats_add(&accpp, &st);
		ck_assert_msg(fabs(s - tu_num(p->exp, "chrf")) <= TOL_CHRF, "pair %zu chrF %.17g vs %.17g",
			      i, s, tu_num(p->exp, "chrf"));
		ck_assert_msg(fabs(spp - tu_num(p->exp, "chrfpp")) <= TOL_CHRF,
			      "pair %zu chrF++ %.17g vs %.17g", i, spp, tu_num(p->exp, "chrfpp"));
		worst = fmax(worst, fabs(s - tu_num(p->exp, "chrf")));
	}
	ck_assert(fabs(lynn_chrf_stats_score(&o, &acc) - tu_num(corpus_exp, "chrf")) <= TOL_CHRF);
	ck_assert(fabs(lynn_chrf_stats_score(&opp, &accpp) - tu_num(corpus_exp, "chrfpp")) <= TOL_CHRF);
	lynn_score_ctx_free(ctx);
}
END_TEST

START_TEST(test_chrf_known)
{
	/* TESTING.md's anchor; and sentence = CLI-less helper with a NULL ctx */
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT, bad = LYNN_CHRF_OPTS_DEFAULT;
	struct lynn_err err = { 0 };
	double s;
	const char *h = "The cat sat on the mat.", *r = "The cat is sitting on the mat.";
	ck_assert_int_eq(lynn_chrf_sentence(NULL, &o, h, strlen(h), r, strlen(r), &s, NULL), 0);
	ck_assert_double_eq_tol(s, 49.6485, 5e-5);
	ck_assert_int_eq(lynn_chrf_sentence(NULL, &o, "", 0, "", 0, &s, NULL), 0);
	ck_assert_double_eq(s, 0.0);
	bad.char_order = 0;
	ck_assert_int_eq(lynn_chrf_sentence(NULL, &bad, h, 1, r, 1, &s, &err), -LYNN_EINVAL);
	ck_assert(strstr(err.msg, "chrf") != NULL);
	/* malformed UTF-8 never fails: each bad sequence is one U+FFFD */
	ck_assert_int_eq(lynn_chrf_sentence(NULL, &o, "\xff\xfe\xe4\xb8", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9, &s,
					    NULL), 0);
	ck_assert_double_eq(s, 100.0);
}
END_TEST

/* ===== ROUGE-L ===== */

START_TEST(test_rouge_corpus_pairs)
{
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	size_t n_ascii = 0;
	for (size_t i = 0; i < n_pairs; i++) {
		const struct pair *p = &pairs[i];
		const cJSON *e = cJSON_GetObjectItem(p->exp, "rougeL");
		struct lynn_rouge r;
		double ep = cJSON_GetArrayItem(e, 0)->valuedouble, er = cJSON_GetArrayItem(e, 1)->valuedouble,
		       ef = cJSON_GetArrayItem(e, 2)->valuedouble;
		/* rouge-score exactly, on every pair */
		ck_assert_int_eq(lynn_rouge_l(ctx, p->hyp, strlen(p->hyp), p->ref, strlen(p->ref),
					      LYNN_ROUGE_F_ASCII_ONLY, &r, NULL), 0);
		ck_assert_msg(fabs(r.precision - ep) <= TOL_ROUGE && fabs(r.recall - er) <= TOL_ROUGE &&
				      fabs(r.fmeasure - ef) <= TOL_ROUGE,
			      "pair %zu rougeL(ascii-only) %.17g vs %.17g", i, r.fmeasure, ef);
		/* the SPEC §6 extension agrees on ASCII pairs */
		if (cJSON_IsTrue(cJSON_GetObjectItem(p->exp, "ascii"))) {
			n_ascii++;
			ck_assert_int_eq(lynn_rouge_l(ctx, p->hyp, strlen(p->hyp), p->ref,
						      strlen(p->ref), 0, &r, NULL), 0);
			ck_assert_msg(fabs(r.fmeasure - ef) <= TOL_ROUGE,
				      "pair %zu rougeL %.17g vs %.17g", i, r.fmeasure, ef);
		}
	}
	ck_assert_uint_ge(n_ascii, 300);
	lynn_score_ctx_free(ctx);
}
END_TEST

START_TEST(test_rouge_stem_corpus_pairs)
{
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	for (size_t i = 0; i < n_pairs; i++) {
		const struct pair *p = &pairs[i];
		const cJSON *e = cJSON_GetObjectItem(p->exp, "rougeL_stem");
		struct lynn_rouge r;
		double ef = cJSON_GetArrayItem(e, 2)->valuedouble;
		ck_assert_int_eq(lynn_rouge_l(ctx, p->hyp, strlen(p->hyp), p->ref, strlen(p->ref),
					      LYNN_ROUGE_F_ASCII_ONLY | LYNN_ROUGE_F_STEM, &r, NULL), 0);
		ck_assert_msg(fabs(r.fmeasure - ef) <= TOL_ROUGE, "pair %zu rougeL+stem %.17g vs %.17g",
			      i, r.fmeasure, ef);
	}
	lynn_score_ctx_free(ctx);
}
END_TEST

START_TEST(test_porter_nltk)
{
	/* NLTK PorterStemmer().stem over roots × suffixes (gen_score_fixtures.py) */
	size_t len, n = 0;
	char *text = tu_read(SCORE_FIX "/porter.tsv", &len), *line, *save = NULL;
	ck_assert_ptr_nonnull(text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t'), out[300];
		int k;
		ck_assert_ptr_nonnull(tab);
		*tab = 0;
		k = lynn_porter_stem(line, strlen(line), out, sizeof out);
		ck_assert_int_ge(k, 0);
		ck_assert_msg(!strcmp(out, tab + 1), "stem(%s) = %s, NLTK %s", line, out, tab + 1);
		n++;
	}
	ck_assert_uint_ge(n, 5000);
	free(text);
}
END_TEST

START_TEST(test_rouge_tokens_spec6)
{
	/* SPEC §6: non-Latin letters are single tokens; Latin with diacritics,
	 * non-ASCII digits, punctuation, emoji and marks separate */
	static const struct { const char *in, *want; } cases[] = {
		{ "Hello, World! 42x", "hello world 42x" },
		{ "今天天气好", "今 天 天 气 好" },
		{ "café naïve", "caf na ve" },
		{ "Привет мир", "П р и в е т м и р" },
		{ "abc中def", "abc 中 def" },
		{ "１２３ ٣٤ 😀 ok", "ok" },
		{ "こんにちは", "こ ん に ち は" },
		{ "", "" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *t = lynn_rouge_tokens(cases[i].in, strlen(cases[i].in), 0, NULL);
		ck_assert_str_eq(t, cases[i].want);
		free(t);
	}
	{
		struct lynn_rouge r;
		const char *a = "今天天气很好", *b = "今天天气不好";
		ck_assert_int_eq(lynn_rouge_l(NULL, a, strlen(a), b, strlen(b), 0, &r, NULL), 0);
		ck_assert_double_eq_tol(r.fmeasure, 5.0 / 6.0, 1e-15);
		ck_assert_int_eq(lynn_rouge_l(NULL, a, strlen(a), b, strlen(b), LYNN_ROUGE_F_ASCII_ONLY,
					      &r, NULL), 0);
		ck_assert_double_eq(r.fmeasure, 0.0);
	}
}
END_TEST

START_TEST(test_composite)
{
	struct lynn_similarity s;
	const char *h = "The cat sat on the mat.", *r = "The cat is sitting on the mat.";
	ck_assert_int_eq(lynn_similarity(NULL, h, strlen(h), r, strlen(r), 0, 0, &s, NULL), 0);
	/* chrF 49.6485170311433 (sacreBLEU), ROUGE-L F 0.7692307692307692 (rouge-score) */
	ck_assert_double_eq_tol(s.chrf, 49.6485170311433, TOL_CHRF);
	ck_assert_double_eq_tol(s.rouge_l, 0.7692307692307692, TOL_ROUGE);
	ck_assert_double_eq_tol(s.score, 0.5 * 49.6485170311433 / 100 + 0.5 * 0.7692307692307692,
				1e-12);
}
END_TEST

/* ===== difflib ===== */

START_TEST(test_seq_ratio_corpus_pairs)
{
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	for (size_t i = 0; i < n_pairs; i++) {
		const struct pair *p = &pairs[i];
		double r1, r2;
		ck_assert_int_eq(lynn_seq_ratio(ctx, p->hyp, strlen(p->hyp), p->ref, strlen(p->ref), 0,
						&r1, NULL), 0);
		ck_assert_int_eq(lynn_seq_ratio(ctx, p->ref, strlen(p->ref), p->hyp, strlen(p->hyp), 0,
						&r2, NULL), 0);
		ck_assert_msg(fabs(r1 - tu_num(p->exp, "seq_ratio")) <= TOL_SEQ,
			      "pair %zu ratio %.17g vs %.17g", i, r1, tu_num(p->exp, "seq_ratio"));
		ck_assert_msg(fabs(r2 - tu_num(p->exp, "seq_ratio_rev")) <= TOL_SEQ,
			      "pair %zu reverse ratio %.17g vs %.17g", i, r2, tu_num(p->exp, "seq_ratio_rev"));
	}
	lynn_score_ctx_free(ctx);
}
END_TEST

/* ===== the toolkit's graders ===== */

static void check_features(const struct lynn_text_features *f, const cJSON *e, size_t i)
{
	ck_assert_msg(f->headers == (int)tu_num(e, "headers") && f->bullets == (int)tu_num(e, "bullets") &&
			      f->code_blocks == (int)tu_num(e, "code_blocks") &&
			      f->tables == (int)tu_num(e, "tables") &&
			      f->paragraphs == (int)tu_num(e, "paragraphs") &&
			      f->numbers == (int)tu_num(e, "numbers"),
		      "pair %zu features h%d b%d c%d t%d p%d n%d", i, f->headers, f->bullets,
		      f->code_blocks, f->tables, f->paragraphs, f->numbers);
}

START_TEST(test_refsim_style_corpus_pairs)
{
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	for (size_t i = 0; i < n_pairs; i++) {
		const struct pair *p = &pairs[i];
		const cJSON *e = cJSON_GetObjectItem(p->exp, "refsim"), *c, *st, *rules;
		struct lynn_refsim r;
		struct lynn_style_result s;
		ck_assert_int_eq(lynn_refsim_score(ctx, NULL, p->prompt, strlen(p->prompt), p->hyp,
						   strlen(p->hyp), p->ref, strlen(p->ref), &r, NULL), 0);
		ck_assert_msg(fabs(r.score - tu_num(e, "score")) <= TOL_ROUNDED,
			      "pair %zu refsim %.17g vs %.17g", i, r.score, tu_num(e, "score"));
		c = cJSON_GetObjectItem(e, "components");
		if (!strcmp(cJSON_GetObjectItem(e, "mode")->valuestring, "reference_similarity")) {
			static const char *const k[] = { "trigram_f1", "bigram_f1", "sequence", "number_f1",
							 "term_f1", "structure", "floor_penalty" };
			const double v[] = { r.trigram_f1, r.bigram_f1, r.sequence, r.number_f1,
					     r.term_f1, r.structure, r.floor_penalty };
			ck_assert(r.has_reference);
			for (size_t q = 0; q < 7; q++)
				ck_assert_msg(fabs(lynn_score_round(v[q], 4) - tu_num(c, k[q])) <= TOL_ROUNDED,
					      "pair %zu %s %.17g vs %.17g", i, k[q], v[q], tu_num(c, k[q]));
			check_features(&r.out_features, cJSON_GetObjectItem(e, "output_features"), i);
			check_features(&r.ref_features, cJSON_GetObjectItem(e, "reference_features"), i);
		} else {
			ck_assert(!r.has_reference);
		}
		st = cJSON_GetObjectItem(p->exp, "style");
		rules = cJSON_GetObjectItem(st, "rules");
		ck_assert_int_eq(lynn_style_score(NULL, p->prompt, strlen(p->prompt), p->hyp,
						  strlen(p->hyp), &s, NULL), 0);
		for (int q = 0; q < LYNN_STYLE_N_RULES; q++)
			ck_assert_msg(s.rules[q] == cJSON_IsTrue(cJSON_GetObjectItem(rules,
						      lynn_style_rule_name(q))),
				      "pair %zu rule %s", i, lynn_style_rule_name(q));
		ck_assert_int_eq(s.n_pass, (int)tu_num(st, "n_rule_pass"));
		ck_assert_int_eq(s.overall_pass, cJSON_IsTrue(cJSON_GetObjectItem(st, "overall_pass")));
	}
	lynn_score_ctx_free(ctx);
}
END_TEST

START_TEST(test_style_cliches_configurable)
{
	const char *cl[] = { "Sure thing" };
	struct lynn_style_opts o = { cl, 1 };
	struct lynn_style_result s;
	const char *out = "  Sure thing! Here is a long enough answer with plenty of characters in it.";
	ck_assert_int_eq(lynn_style_score(&o, "", 0, out, strlen(out), &s, NULL), 0);
	ck_assert(!s.rules[LYNN_STYLE_NO_CLICHE]);
	ck_assert_int_eq(lynn_style_score(NULL, "", 0, out, strlen(out), &s, NULL), 0);
	ck_assert(s.rules[LYNN_STYLE_NO_CLICHE]);
}
END_TEST

START_TEST(test_tool_calls_toolkit)
{
	/* four_gate_eval.score_tool_call on 400 generated outputs */
	size_t n;
	cJSON **c = load_jsonl(SCORE_FIX "/tools.jsonl", &n);
	ck_assert_uint_ge(n, 400);
	for (size_t i = 0; i < n; i++) {
		const char *o = cJSON_GetObjectItem(c[i], "output")->valuestring;
		const cJSON *e = cJSON_GetObjectItem(c[i], "expected"), *r = cJSON_GetObjectItem(c[i], "result");
		struct lynn_tool_result t;
		ck_assert_int_eq(lynn_grade_tool_call(o, strlen(o),
						      cJSON_GetObjectItem(e, "tool_name")->valuestring,
						      cJSON_GetObjectItem(e, "param_hints"), &t, NULL), 0);
		ck_assert_msg(t.pass == cJSON_IsTrue(cJSON_GetObjectItem(r, "pass")), "case %zu pass", i);
		ck_assert_msg(!strcmp(lynn_tool_via_name(t.via),
				      cJSON_GetObjectItem(r, "via")->valuestring), "case %zu via %s", i,
			      lynn_tool_via_name(t.via));
		ck_assert_msg(t.n_calls == (int)tu_num(r, "n_calls"), "case %zu calls %d", i, t.n_calls);
		if (t.via == LYNN_TOOL_VIA_SUBSTRING) {
			ck_assert(t.has_name == cJSON_IsTrue(cJSON_GetObjectItem(r, "has_name")));
			ck_assert(t.has_param == cJSON_IsTrue(cJSON_GetObjectItem(r, "has_param")));
		}
		cJSON_Delete(c[i]);
	}
	free(c);
}
END_TEST

START_TEST(test_tool_calls_xml)
{
	/* SPEC §5: the Qwen3.5 XML form counts as a structured call */
	const char *o = "<tool_call>\n<function=get_weather>\n<parameter=city>\nBeijing\n</parameter>\n"
			"<parameter=unit>\nC\n</parameter>\n</function>\n</tool_call>";
	struct lynn_tool_result t;
	cJSON *calls = lynn_tool_calls_extract(o, strlen(o), NULL), *args;
	ck_assert_int_eq(cJSON_GetArraySize(calls), 1);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "name")->valuestring,
			 "get_weather");
	args = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "arguments");
	ck_assert_str_eq(cJSON_GetObjectItem(args, "city")->valuestring, "Beijing");
	ck_assert_str_eq(cJSON_GetObjectItem(args, "unit")->valuestring, "C");
	cJSON_Delete(calls);
	ck_assert_int_eq(lynn_grade_tool_call(o, strlen(o), "get_weather", NULL, &t, NULL), 0);
	ck_assert(t.pass && t.via == LYNN_TOOL_VIA_STRUCTURED);
	ck_assert_int_eq(lynn_grade_tool_call(o, strlen(o), "web_search", NULL, &t, NULL), 0);
	ck_assert(!t.pass && t.via == LYNN_TOOL_VIA_STRUCTURED_MISMATCH);
}
END_TEST

START_TEST(test_gold_toolkit)
{
	/* four_gate_eval.score_string_match on generated outputs */
	size_t n;
	cJSON **c = load_jsonl(SCORE_FIX "/gold.jsonl", &n);
	struct lynn_err err = { 0 };
	bool pass;
	ck_assert_uint_ge(n, 250);
	for (size_t i = 0; i < n; i++) {
		const char *o = cJSON_GetObjectItem(c[i], "output")->valuestring;
		const cJSON *v = cJSON_GetObjectItem(c[i], "verifier");
		ck_assert_int_eq(lynn_grade_gold(o, strlen(o), cJSON_GetObjectItem(c[i], "gold")->valuestring,
						 cJSON_IsString(v) ? v->valuestring : NULL, &pass, NULL), 0);
		ck_assert_msg(pass == cJSON_IsTrue(cJSON_GetObjectItem(c[i], "pass")), "case %zu", i);
		cJSON_Delete(c[i]);
	}
	free(c);
	ck_assert_int_eq(lynn_grade_gold("x", 1, "([", "regex", &pass, &err), -LYNN_EFORMAT);
	ck_assert(strstr(err.msg, "'(['") != NULL);
}
END_TEST

START_TEST(test_daily_grader)
{
	/* lynn's own definition (docs/grading.md), case by case */
	static const struct { const char *in, *want; } norm[] = {
		{ "The answer is $\\boxed{\\frac{1}{2}}$.", "the answer is 1/2 ." },
		{ "\\text{Total}: 1,234,567 and 2.500", "total: 1234567 and 2.5" },
		{ "3.000 kg, 10.", "3 kg, 10." },
		{ "  \\dfrac{a+1}{b}  ", "a+1/b" },
		{ "12,34 stays", "12,34 stays" },
		{ "\\left( x \\right)", "( x )" },
	};
	static const struct { const char *ans, *gold; bool pass; enum lynn_daily_via via; } g[] = {
		{ "So the result is \\boxed{42}.", "42", true, LYNN_DAILY_EXACT },
		{ "The total is 1,200 dollars", "1200", true, LYNN_DAILY_EXACT },
		{ "x = 0.50", "0.5", true, LYNN_DAILY_EXACT },
		{ "We get 142 apples", "42", false, LYNN_DAILY_FAIL },
		{ "It is 10.5", "5", false, LYNN_DAILY_FAIL },
		{ "Paris is the capital of France", "paris, france", true, LYNN_DAILY_TOKENS },
		{ "The capital: Paris", "Paris France", false, LYNN_DAILY_FAIL },
		{ "a b c d", "a b c x", true, LYNN_DAILY_TOKENS },
		{ "北京是首都", "北京", true, LYNN_DAILY_EXACT },
		{ "answer 1/2", "\\frac{1}{2}", true, LYNN_DAILY_EXACT },
	};
	for (size_t i = 0; i < sizeof norm / sizeof *norm; i++) {
		char *s = lynn_daily_normalize(norm[i].in, strlen(norm[i].in), NULL);
		ck_assert_msg(!strcmp(s, norm[i].want), "normalize(%s) = '%s'", norm[i].in, s);
		free(s);
	}
	for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
		struct lynn_daily_result r;
		ck_assert_int_eq(lynn_grade_daily(g[i].ans, strlen(g[i].ans), g[i].gold, &r, NULL), 0);
		ck_assert_msg(r.pass == g[i].pass && r.via == g[i].via, "case %zu: pass %d via %d", i,
			      r.pass, r.via);
	}
}
END_TEST

/* ===== lynn score ===== */

static char *write_tmp(const char *dir, const char *name, const char *text)
{
	char *p;
	ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	tu_write(p, text, strlen(text));
	return p;
}

START_TEST(test_cli_score)
{
	char *d = tu_mkdtemp(), *h, *r, *j, *args;
	struct tu_run run;
	cJSON *o;
	h = write_tmp(d, "h.txt", "The cat sat on the mat.\n\n");
	r = write_tmp(d, "r.txt", "The cat is sitting on the mat.\nabc\n");
	j = write_tmp(d, "p.jsonl", "{\"hyp\":\"The cat sat on the mat.\",\"ref\":\"The cat is sitting on the mat.\"}\n\n");
	ck_assert(asprintf(&args, "score --metric chrf --hyp '%s' --ref '%s'", h, r) > 0);
	run = tu_lynn(args, NULL, NULL);
	ck_assert_msg(run.status == 0, "%s", run.err);
	/* sacreBLEU: sentence 49.6485170311433 and 0.0, corpus 47.45664831757291 */
	ck_assert_str_eq(run.out, "49.648517\n0.000000\ncorpus 47.456648\n");
	tu_run_free(&run);
	free(args);
	ck_assert(asprintf(&args, "score --metric composite --json --hyp '%s'", j) > 0);
	run = tu_lynn(args, NULL, NULL);
	ck_assert_msg(run.status == 0, "%s", run.err);
	o = cJSON_Parse(run.out);
	ck_assert_ptr_nonnull(o);
	ck_assert_str_eq(cJSON_GetObjectItem(o, "metric")->valuestring, "composite");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "scores")), 1);
	ck_assert_double_eq_tol(cJSON_GetObjectItem(o, "corpus")->valuedouble,
				0.5 * 49.6485170311433 / 100 + 0.5 * 0.7692307692307692, 1e-12);
	cJSON_Delete(o);
	tu_run_free(&run);
	free(args);
	ck_assert(asprintf(&args, "score --metric refsim --json --hyp '%s'", j) > 0);
	run = tu_lynn(args, NULL, NULL);
	ck_assert_msg(run.status == 0, "%s", run.err);
	o = cJSON_Parse(run.out);
	ck_assert_double_eq_tol(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "scores"),
						   0), "score")->valuedouble, 0.7803, TOL_ROUNDED);
	cJSON_Delete(o);
	tu_run_free(&run);
	free(args);
	unlink(h);
	unlink(r);
	unlink(j);
	rmdir(d);
	free(h);
	free(r);
	free(j);
	free(d);
}
END_TEST

START_TEST(test_cli_bad_input)
{
	char *d = tu_mkdtemp(), *h, *r, *bad, *notobj, *noref;
	h = write_tmp(d, "h.txt", "a\nb\n");
	r = write_tmp(d, "r.txt", "a\n");
	bad = write_tmp(d, "bad.jsonl", "{\"hyp\": \"x\", \"ref\": \n");
	notobj = write_tmp(d, "arr.jsonl", "[1,2]\n");
	noref = write_tmp(d, "noref.jsonl", "{\"hyp\": \"x\"}\n");
	{
		struct { char *args; const char *needle; } cases[6];
		ck_assert(asprintf(&cases[0].args, "score --metric chrf --hyp '%s' --ref '%s'", h, r) > 0);
		cases[0].needle = "lines";
		ck_assert(asprintf(&cases[1].args, "score --metric chrf --hyp '%s'", bad) > 0);
		cases[1].needle = "bad.jsonl' line 1";
		ck_assert(asprintf(&cases[2].args, "score --metric chrf --hyp '%s'", notobj) > 0);
		cases[2].needle = "not a JSON object";
		ck_assert(asprintf(&cases[3].args, "score --metric rougeL --hyp '%s'", noref) > 0);
		cases[3].needle = "'ref'";
		ck_assert(asprintf(&cases[4].args, "score --metric bleu --hyp '%s' --ref '%s'", h, r) > 0);
		cases[4].needle = "unknown metric";
		ck_assert(asprintf(&cases[5].args, "score --metric chrf --hyp '%s/missing' --ref '%s'", d,
				   r) > 0);
		cases[5].needle = "missing";
		for (size_t i = 0; i < 6; i++) {
			struct tu_run run = tu_lynn(cases[i].args, NULL, NULL);
			ck_assert_msg(run.status == 2, "case %zu: status %d", i, run.status);
			ck_assert_msg(strstr(run.err, cases[i].needle), "case %zu: %s", i, run.err);
			tu_run_free(&run);
			free(cases[i].args);
		}
	}
	unlink(h);
	unlink(r);
	unlink(bad);
	unlink(notobj);
	unlink(noref);
	rmdir(d);
	free(h);
	free(r);
	free(bad);
	free(notobj);
	free(noref);
	free(d);
}
END_TEST

Suite *score_suite(void)
{
	Suite *s = suite_create("score");
	TCase *tc = tcase_create("oracles");
	tcase_add_unchecked_fixture(tc, load_fixtures, free_fixtures);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_chrf_corpus_pairs);
	tcase_add_test(tc, test_rouge_corpus_pairs);
	tcase_add_test(tc, test_rouge_stem_corpus_pairs);
	tcase_add_test(tc, test_seq_ratio_corpus_pairs);
	tcase_add_test(tc, test_refsim_style_corpus_pairs);
	suite_add_tcase(s, tc);
	tc = tcase_create("units");
	tcase_add_test(tc, test_chrf_known);
	tcase_add_test(tc, test_rouge_tokens_spec6);
	tcase_add_test(tc, test_porter_nltk);
	tcase_add_test(tc, test_tool_calls_toolkit);
	tcase_add_test(tc, test_tool_calls_xml);
	tcase_add_test(tc, test_gold_toolkit);
	tcase_add_test(tc, test_daily_grader);
	tcase_add_test(tc, test_composite);
	tcase_add_test(tc, test_style_cliches_configurable);
	suite_add_tcase(s, tc);
	tc = tcase_create("cli");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cli_score);
	tcase_add_test(tc, test_cli_bad_input);
	suite_add_tcase(s, tc);
	return s;
}
