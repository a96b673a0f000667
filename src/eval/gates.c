/*
 * gates.c - the four gates of SPEC §5, the verdict, the lynn-4gate-v1 report
 * and its Markdown summary, and the daily-mix comparison.
 *
 * The numbers follow the original toolkit's arithmetic step by step, since a
 * cutover script compares them with thresholds: the g1 mean is Python's
 * statistics.mean (exact, then rounded once), each reported value is
 * rounded with Python's round(), and a gate's pass/fail uses the unrounded
 * value where the toolkit does while hard_fail_reasons use the rounded one.
 * The graders themselves live in src/score (score.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/score.h"
#include "lynn/util.h"

__extension__ typedef unsigned __int128 u128;

/* ===== Python numerics ===== */

void lynn_eval_pyfloat(double x, char *buf, size_t cap)
{
	char e[40], digits[24];
	int p, exp, nd = 0;

	if (isnan(x)) {
		snprintf(buf, cap, "nan");
		return;
	}
	if (isinf(x)) {
		snprintf(buf, cap, x < 0 ? "-inf" : "inf");
		return;
	}
	if (x == 0) {
		snprintf(buf, cap, signbit(x) ? "-0.0" : "0.0");
		return;
	}
	/* shortest round-tripping digits, as repr() */
	for (p = 1; p <= 17; p++) {
		snprintf(e, sizeof(e), "%.*e", p - 1, x);
		if (strtod(e, NULL) == x)
			break;
	}
	{
		const char *s = e + (e[0] == '-');
		for (; *s && *s != 'e'; s++)
			if (*s >= '0' && *s <= '9')
				digits[nd++] = *s;
		digits[nd] = 0;
		exp = atoi(s + 1);
		while (nd > 1 && digits[nd - 1] == '0')
			digits[--nd] = 0;
	}
	{
		struct lynn_buf b = LYNN_BUF_INIT;
		if (x < 0)
			lynn_buf_putc(&b, '-');
		if (exp >= 16 || exp < -4) {
			lynn_buf_putc(&b, digits[0]);
			if (nd > 1)
				lynn_buf_printf(&b, ".%s", digits + 1);
			lynn_buf_printf(&b, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
		} else if (exp >= 0) {
			for (int i = 0; i <= exp; i++)
				lynn_buf_putc(&b, i < nd ? digits[i] : '0');
			lynn_buf_printf(&b, ".%s", nd > exp + 1 ? digits + exp + 1 : "0");
		} else {
			lynn_buf_puts(&b, "0.");
			for (int i = 0; i < -exp - 1; i++)
				lynn_buf_putc(&b, '0');
			lynn_buf_puts(&b, digits);
		}
		snprintf(buf, cap, "%s", b.data ? b.data : "0.0");
		lynn_buf_release(&b);
	}
}

static int bitlen128(u128 v)
{
	int n = 0;
	while (v) {
		v >>= 1;
		n++;
	}
	return n;
}

/* S / d correctly rounded to a double (round half to even). */
static double ratio_round(u128 s, uint64_t d)
{
	int sh, nb, drop;
	u128 q, r, top;
	bool sticky;
	double m;

	if (!s)
		return 0;
	sh = 126 - bitlen128(s);
	s <<= sh;
	q = s / d;
	r = s % d;
	nb = bitlen128(q);
	drop = nb - 53;
	top = q >> drop;
	sticky = r != 0 || (q & (((u128)1 << (drop - 1)) - 1)) != 0;
	if ((q >> (drop - 1)) & 1) { /* the round bit */
		if (sticky || (top & 1))
			top++;
	}
	m = (double)(uint64_t)top;
	return ldexp(m, drop - sh);
}

/* statistics.mean of style pass ratios (each k/5 as a double): the exact
 * sum of the doubles divided by n, rounded once. Every fl(k/5) is an integer
 * multiple of 2^-55, so the sum is exact in 128-bit integers. */
static double mean_of_fifths(const int *n_pass, size_t n)
{
	u128 s = 0;
	for (size_t i = 0; i < n; i++)
		s += (u128)(uint64_t)ldexp((double)n_pass[i] / LYNN_STYLE_N_RULES, 55);
	return ldexp(ratio_round(s, n), -55);
}

static double pyround(double x, int nd)
{
	return lynn_score_round(x, nd);
}

/* ===== small helpers ===== */

static size_t cp_len(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/* The first n code points of s (a fresh copy). */
static char *cp_prefix(const char *s, size_t n)
{
	size_t i = 0, k = 0;
	for (; s[i]; i++) {
		if (((unsigned char)s[i] & 0xc0) != 0x80) {
			if (k == n)
				break;
			k++;
		}
	}
	return strndup(s, i);
}

static void add_id(cJSON *o, const char *key, const char *id)
{
	if (id)
		cJSON_AddStringToObject(o, key, id);
	else
		cJSON_AddNullToObject(o, key);
}

static const char *pf(const char *verdict_pass, bool ok)
{
	(void)verdict_pass;
	return ok ? "PASS" : "FAIL";
}

/* ===== g1 style ===== */

struct g1_res {
	struct lynn_style_result *style; /* per item */
	double avg_style, avg_style_raw, cliche_pct, cliche_pct_raw;
	bool pass;
};

static cJSON *gate_g1(const struct lynn_eval_inputs *in, const struct lynn_style_opts *so,
		      struct g1_res *g, struct lynn_err *err)
{
	const struct lynn_eval_set *set = in->style;
	cJSON *gate = cJSON_CreateObject(), *items;
	int *np = calloc(set->n ? set->n : 1, sizeof(int));
	size_t n_cf = 0;

	g->style = calloc(set->n ? set->n : 1, sizeof(*g->style));
	if (!gate || !np || !g->style)
		goto oom;
	items = cJSON_CreateArray();
	for (size_t i = 0; i < set->n; i++) {
		const struct lynn_eval_item *it = &set->items[i];
		const struct lynn_eval_output *o = &in->style_cand[i];
		struct lynn_style_result *r = &g->style[i];
		cJSON *x = cJSON_CreateObject();
		char idbuf[32], *p200;
		if (lynn_style_score(so, it->prompt, strlen(it->prompt), o->text, strlen(o->text), r, err))
			goto fail;
		np[i] = r->n_pass;
		n_cf += r->rules[LYNN_STYLE_NO_CLICHE];
		snprintf(idbuf, sizeof(idbuf), "v4_%03zu", i + 1);
		p200 = cp_prefix(it->prompt, 200);
		cJSON_AddNumberToObject(x, "idx", (double)(i + 1));
		cJSON_AddStringToObject(x, "id", it->id ? it->id : idbuf);
		cJSON_AddStringToObject(x, "category", it->category);
		cJSON_AddStringToObject(x, "prompt", p200 ? p200 : "");
		free(p200);
		cJSON_AddNumberToObject(x, "output_len", (double)cp_len(o->text));
		cJSON_AddNumberToObject(x, "latency_s", pyround(o->latency_s, 2));
		cJSON_AddNumberToObject(x, "rule_pass_ratio", (double)r->n_pass / LYNN_STYLE_N_RULES);
		cJSON_AddBoolToObject(x, "cliche_free", r->rules[LYNN_STYLE_NO_CLICHE]);
		cJSON_AddBoolToObject(x, "overall_pass", r->overall_pass);
		cJSON_AddItemToArray(items, x);
	}
	g->avg_style_raw = mean_of_fifths(np, set->n) * 5.0;
	g->cliche_pct_raw = (double)n_cf / (double)set->n * 100;
	g->avg_style = pyround(g->avg_style_raw, 3);
	g->cliche_pct = pyround(g->cliche_pct_raw, 2);
	g->pass = g->avg_style_raw >= LYNN_EVAL_MIN_AVG_STYLE &&
		  g->cliche_pct_raw >= LYNN_EVAL_MIN_CLICHE_FREE_PCT;
	cJSON_AddStringToObject(gate, "verdict", pf(NULL, g->pass));
	cJSON_AddNumberToObject(gate, "n", (double)set->n);
	cJSON_AddNumberToObject(gate, "avg_style", g->avg_style);
	cJSON_AddNumberToObject(gate, "cliche_free_pct", g->cliche_pct);
	cJSON_AddItemToObject(gate, "items", items);
	free(np);
	return gate;
oom:
	lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
fail:
	free(np);
	cJSON_Delete(gate);
	return NULL;
}

/* ===== g2 regression ===== */

struct g2_side {
	double cand_pct, base_pct, delta; /* delta rounded to 2 */
	cJSON *items_cand, *items_base;
};

static int grade_v8(const struct lynn_eval_item *it, const char *out, bool *pass, const char **via,
		    struct lynn_err *err)
{
	struct lynn_tool_result r;
	int rc = lynn_grade_tool_call(out, strlen(out), it->tool_name, it->param_hints, &r, err);
	if (rc)
		return rc;
	*pass = r.pass;
	*via = lynn_tool_via_name(r.via);
	return 0;
}

static int grade_v9(const struct lynn_eval_item *it, const char *out, bool *pass, const char **via,
		    struct lynn_err *err)
{
	if (!it->gold) {
		/* no gold: the style rules decide (the toolkit's rule_fallback) */
		struct lynn_style_result r;
		int rc = lynn_style_score(NULL, it->prompt, strlen(it->prompt), out, strlen(out), &r, err);
		if (rc)
			return rc;
		*pass = r.overall_pass;
		*via = "rule_fallback";
		return 0;
	}
	*via = it->verifier;
	return lynn_grade_gold(out, strlen(out), it->gold, it->verifier, pass, err);
}

typedef int (*grade_fn)(const struct lynn_eval_item *, const char *, bool *, const char **,
			struct lynn_err *);

static int gate_g2_side(const struct lynn_eval_set *set, const struct lynn_eval_output *cand,
			const struct lynn_eval_output *base, grade_fn grade, struct g2_side *s,
			struct lynn_err *err)
{
	size_t pc = 0, pb = 0;
	s->items_cand = cJSON_CreateArray();
	s->items_base = cJSON_CreateArray();
	for (int side = 0; side < 2; side++) {
		const struct lynn_eval_output *outs = side ? base : cand;
		for (size_t i = 0; i < set->n; i++) {
			bool pass = false;
			const char *via = "";
			cJSON *x;
			int rc = grade(&set->items[i], outs[i].text, &pass, &via, err);
			if (rc)
				return rc;
			x = cJSON_CreateObject();
			add_id(x, "id", set->items[i].id);
			cJSON_AddBoolToObject(x, "pass", pass);
			cJSON_AddStringToObject(x, "via", via);
			cJSON_AddItemToArray(side ? s->items_base : s->items_cand, x);
			if (side)
				pb += pass;
			else
				pc += pass;
		}
	}
	{
		double cp = (double)pc / (double)set->n * 100, bp = (double)pb / (double)set->n * 100;
		s->cand_pct = pyround(cp, 2);
		s->base_pct = pyround(bp, 2);
		s->delta = pyround(cp - bp, 2);
	}
	return 0;
}

/* ===== g3 base parity ===== */

static cJSON *components(const struct lynn_refsim *r)
{
	cJSON *c = cJSON_CreateObject();
	cJSON_AddNumberToObject(c, "trigram_f1", pyround(r->trigram_f1, 4));
	cJSON_AddNumberToObject(c, "bigram_f1", pyround(r->bigram_f1, 4));
	cJSON_AddNumberToObject(c, "sequence", pyround(r->sequence, 4));
	cJSON_AddNumberToObject(c, "number_f1", pyround(r->number_f1, 4));
	cJSON_AddNumberToObject(c, "term_f1", pyround(r->term_f1, 4));
	cJSON_AddNumberToObject(c, "structure", pyround(r->structure, 4));
	cJSON_AddNumberToObject(c, "floor_penalty", pyround(r->floor_penalty, 4));
	return c;
}

static cJSON *gate_g3(const struct lynn_eval_inputs *in, const struct lynn_style_opts *so,
		      const struct g1_res *g1, double *net_rounded, struct lynn_err *err)
{
	const struct lynn_eval_set *set = in->style;
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(err);
	cJSON *gate = NULL, *items = cJSON_CreateArray();
	int aw = 0, bw = 0, tie = 0, tbp = 0, tbf = 0;
	double net;

	if (!ctx)
		goto fail;
	for (size_t i = 0; i < set->n; i++) {
		const struct lynn_eval_item *it = &set->items[i];
		const char *ca = in->style_cand[i].text, *cb = in->style_base[i].text;
		bool apass = g1->style[i].overall_pass, bpass;
		struct lynn_style_result bs;
		const char *bucket;
		cJSON *x = cJSON_CreateObject();

		cJSON_AddItemToArray(items, x);
		if (lynn_style_score(so, it->prompt, strlen(it->prompt), cb, strlen(cb), &bs, err))
			goto fail;
		bpass = bs.overall_pass;
		add_id(x, "id", it->id);
		cJSON_AddStringToObject(x, "category", it->category);
		cJSON_AddBoolToObject(x, "adapter_pass", apass);
		cJSON_AddBoolToObject(x, "base_pass", bpass);
		if (it->reference) {
			struct lynn_refsim ra, rb;
			double delta;
			size_t rl = strlen(it->reference);
			if (lynn_refsim_score(ctx, so, it->prompt, strlen(it->prompt), ca, strlen(ca),
					      it->reference, rl, &ra, err) ||
			    lynn_refsim_score(ctx, so, it->prompt, strlen(it->prompt), cb, strlen(cb),
					      it->reference, rl, &rb, err))
				goto fail;
			delta = ra.score - rb.score;
			if (delta >= LYNN_EVAL_MIN_REFERENCE_WIN_DELTA) {
				bucket = "adapter_win";
				aw++;
			} else if (delta <= -LYNN_EVAL_MIN_REFERENCE_WIN_DELTA) {
				bucket = "base_win";
				bw++;
			} else {
				bucket = "tie";
				tie++;
			}
			cJSON_AddStringToObject(x, "bucket", bucket);
			cJSON_AddNumberToObject(x, "adapter_ref_score", ra.score);
			cJSON_AddNumberToObject(x, "base_ref_score", rb.score);
			cJSON_AddNumberToObject(x, "ref_delta", pyround(delta, 4));
			cJSON_AddItemToObject(x, "adapter_components", components(&ra));
			cJSON_AddItemToObject(x, "base_components", components(&rb));
			cJSON_AddNumberToObject(x, "reference_len", (double)cp_len(it->reference));
			cJSON_AddNumberToObject(x, "adapter_len", (double)cp_len(ca));
			cJSON_AddNumberToObject(x, "base_len", (double)cp_len(cb));
		} else {
			if (apass && !bpass) {
				bucket = "adapter_win";
				aw++;
			} else if (bpass && !apass) {
				bucket = "base_win";
				bw++;
			} else if (apass && bpass) {
				bucket = "tie_both_pass";
				tbp++;
			} else {
				bucket = "tie_both_fail";
				tbf++;
			}
			cJSON_AddStringToObject(x, "bucket", bucket);
			cJSON_AddStringToObject(x, "mode", "rule_fallback_no_reference");
		}
	}
	{
		double n = (double)set->n;
		net = (double)(aw - bw) / n * 100;
		*net_rounded = pyround(net, 2);
		gate = cJSON_CreateObject();
		cJSON_AddStringToObject(gate, "verdict", pf(NULL, net >= LYNN_EVAL_MIN_NET_SCORE));
		cJSON_AddNumberToObject(gate, "n", n);
		cJSON_AddNumberToObject(gate, "adapter_win", aw);
		cJSON_AddNumberToObject(gate, "base_win", bw);
		cJSON_AddNumberToObject(gate, "tie", tie);
		cJSON_AddNumberToObject(gate, "tie_both_pass", tbp);
		cJSON_AddNumberToObject(gate, "tie_both_fail", tbf);
		cJSON_AddNumberToObject(gate, "adapter_win_pp", pyround((double)aw / n * 100, 2));
		cJSON_AddNumberToObject(gate, "base_win_pp", pyround((double)bw / n * 100, 2));
		cJSON_AddNumberToObject(gate, "net_score", *net_rounded);
		cJSON_AddNumberToObject(gate, "min_reference_win_delta", LYNN_EVAL_MIN_REFERENCE_WIN_DELTA);
		cJSON_AddStringToObject(gate, "scoring", "reference_similarity_v1");
		cJSON_AddItemToObject(gate, "items", items);
		items = NULL;
	}
fail:
	cJSON_Delete(items);
	lynn_score_ctx_free(ctx);
	return gate;
}

/* ===== sanity ===== */

cJSON *lynn_eval_sanity(const char *json_path, bool flag_pass)
{
	cJSON *s = cJSON_CreateObject();
	if (json_path) {
		struct lynn_err e = { 0 };
		cJSON *d = NULL;
		if (!lynn_file_exists(json_path)) {
			cJSON_AddBoolToObject(s, "pass", 0);
			cJSON_AddStringToObject(s, "source", "json_missing");
			cJSON_AddStringToObject(s, "report_path", json_path);
			return s;
		}
		d = lynn_json_load(json_path, LYNN_JSON_MAX_SIZE, &e);
		if (!d || !cJSON_IsObject(d)) {
			char src[300];
			snprintf(src, sizeof(src), "json_parse_error:%s", d ? "not a JSON object" : e.msg);
			cJSON_Delete(d);
			cJSON_AddBoolToObject(s, "pass", 0);
			cJSON_AddStringToObject(s, "source", src);
			cJSON_AddStringToObject(s, "report_path", json_path);
			return s;
		}
		{
			/* Python bool(data.get("pass", False)) */
			cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "pass");
			bool pass = p && (cJSON_IsTrue(p) || (cJSON_IsNumber(p) && p->valuedouble != 0) ||
					  (cJSON_IsString(p) && p->valuestring[0]) ||
					  (cJSON_IsArray(p) && cJSON_GetArraySize(p)) ||
					  (cJSON_IsObject(p) && p->child));
			static const char *keep[] = { "n_pass", "n_total", "schema_version" };
			cJSON_AddBoolToObject(s, "pass", pass);
			cJSON_AddStringToObject(s, "source", "json");
			cJSON_AddStringToObject(s, "report_path", json_path);
			for (size_t k = 0; k < LYNN_ARRAY_LEN(keep); k++) {
				cJSON *v = cJSON_GetObjectItemCaseSensitive(d, keep[k]);
				cJSON_AddItemToObject(s, keep[k], v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
			}
		}
		cJSON_Delete(d);
		return s;
	}
	cJSON_AddBoolToObject(s, "pass", flag_pass);
	cJSON_AddStringToObject(s, "source", flag_pass ? "flag" : "implicit_false");
	cJSON_AddNullToObject(s, "report_path");
	return s;
}

/* ===== the report ===== */

static void reason(cJSON *arr, const char *what, double v, double thr)
{
	char a[40], b[40], line[160];
	lynn_eval_pyfloat(v, a, sizeof(a));
	lynn_eval_pyfloat(thr, b, sizeof(b));
	snprintf(line, sizeof(line), "%s=%s < %s", what, a, b);
	cJSON_AddItemToArray(arr, cJSON_CreateString(line));
}

cJSON *lynn_eval_report(const struct lynn_eval_inputs *in, bool *net_win, struct lynn_err *err)
{
	struct lynn_style_opts so = { in->cliches, in->n_cliches };
	struct g1_res g1 = { 0 };
	struct g2_side v8 = { 0 }, v9 = { 0 };
	cJSON *rep = NULL, *g1j = NULL, *g3j = NULL, *g2j, *th, *gates, *d, *hf;
	double net = 0;
	bool sanity_pass;

	*net_win = false;
	if (!in->style->n || !in->v8->n || !in->v9->n) {
		lynn_errf(err, -LYNN_EINVAL, "eval: empty prompt set (style %zu, v8 %zu, v9 %zu records)",
			  in->style->n, in->v8->n, in->v9->n);
		return NULL;
	}
	if (!(g1j = gate_g1(in, &so, &g1, err)))
		goto fail;
	if (gate_g2_side(in->v8, in->v8_cand, in->v8_base, grade_v8, &v8, err) ||
	    gate_g2_side(in->v9, in->v9_cand, in->v9_base, grade_v9, &v9, err))
		goto fail;
	if (!(g3j = gate_g3(in, &so, &g1, &net, err)))
		goto fail;

	rep = lynn_json_report_new(LYNN_EVAL_SCHEMA);
	cJSON_AddStringToObject(rep, "runner", in->runner ? in->runner : "local");
	cJSON_AddStringToObject(rep, "model_tag", in->model_tag ? in->model_tag : "");
	cJSON_AddStringToObject(rep, "base", in->base ? in->base : "");
	add_id(rep, "adapter", in->adapter);
	hf = cJSON_CreateArray();
	sanity_pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in->sanity, "pass"));
	if (!sanity_pass) {
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(in->sanity, "source");
		char line[400];
		snprintf(line, sizeof(line), "sanity.pass=False (source=%s)",
			 cJSON_IsString(src) ? src->valuestring : "None");
		cJSON_AddItemToArray(hf, cJSON_CreateString(line));
	}
	if (g1.avg_style < LYNN_EVAL_MIN_AVG_STYLE)
		reason(hf, "g1.avg_style", g1.avg_style, LYNN_EVAL_MIN_AVG_STYLE);
	if (g1.cliche_pct < LYNN_EVAL_MIN_CLICHE_FREE_PCT)
		reason(hf, "g1.cliche_free_pct", g1.cliche_pct, LYNN_EVAL_MIN_CLICHE_FREE_PCT);
	if (v8.delta < LYNN_EVAL_MAX_REGRESSION_PP)
		reason(hf, "g2.v8_delta_pp", v8.delta, LYNN_EVAL_MAX_REGRESSION_PP);
	if (v9.delta < LYNN_EVAL_MAX_REGRESSION_PP)
		reason(hf, "g2.v9_delta_pp", v9.delta, LYNN_EVAL_MAX_REGRESSION_PP);
	if (net < LYNN_EVAL_MIN_NET_SCORE)
		reason(hf, "g3.net_score", net, LYNN_EVAL_MIN_NET_SCORE);
	*net_win = cJSON_GetArraySize(hf) == 0;
	cJSON_AddStringToObject(rep, "verdict", *net_win ? "NET_WIN" : "ABORT");
	cJSON_AddNumberToObject(rep, "net_score", net);
	th = cJSON_AddObjectToObject(rep, "thresholds");
	cJSON_AddNumberToObject(th, "min_net_score", LYNN_EVAL_MIN_NET_SCORE);
	cJSON_AddNumberToObject(th, "max_regression_pp", LYNN_EVAL_MAX_REGRESSION_PP);
	cJSON_AddNumberToObject(th, "min_avg_style", LYNN_EVAL_MIN_AVG_STYLE);
	cJSON_AddNumberToObject(th, "min_cliche_free_pct", LYNN_EVAL_MIN_CLICHE_FREE_PCT);
	cJSON_AddNumberToObject(th, "min_reference_win_delta", LYNN_EVAL_MIN_REFERENCE_WIN_DELTA);
	gates = cJSON_AddObjectToObject(rep, "gates");
	cJSON_AddItemToObject(gates, "g1_v4_style", g1j);
	g1j = NULL;
	g2j = cJSON_AddObjectToObject(gates, "g2_regression");
	cJSON_AddStringToObject(g2j, "verdict",
				pf(NULL, v8.delta >= LYNN_EVAL_MAX_REGRESSION_PP &&
						 v9.delta >= LYNN_EVAL_MAX_REGRESSION_PP));
	cJSON_AddNumberToObject(g2j, "v8_delta_pp", v8.delta);
	cJSON_AddNumberToObject(g2j, "v9_delta_pp", v9.delta);
	cJSON_AddNumberToObject(g2j, "v8_adapter_pass_pct", v8.cand_pct);
	cJSON_AddNumberToObject(g2j, "v8_base_pass_pct", v8.base_pct);
	cJSON_AddNumberToObject(g2j, "v9_adapter_pass_pct", v9.cand_pct);
	cJSON_AddNumberToObject(g2j, "v9_base_pass_pct", v9.base_pct);
	cJSON_AddItemToObject(g2j, "v8_items_adapter", v8.items_cand);
	cJSON_AddItemToObject(g2j, "v8_items_base", v8.items_base);
	cJSON_AddItemToObject(g2j, "v9_items_adapter", v9.items_cand);
	cJSON_AddItemToObject(g2j, "v9_items_base", v9.items_base);
	v8.items_cand = v8.items_base = v9.items_cand = v9.items_base = NULL;
	cJSON_AddItemToObject(gates, "g3_base_parity", g3j);
	g3j = NULL;
	d = cJSON_AddObjectToObject(rep, "deltas");
	cJSON_AddNumberToObject(d, "adapter_vs_base_win_pp", net);
	cJSON_AddNumberToObject(d, "v8_regression_pp", v8.delta);
	cJSON_AddNumberToObject(d, "v9_regression_pp", v9.delta);
	cJSON_AddItemToObject(rep, "hard_fail_reasons", hf);
	cJSON_AddItemToObject(rep, "sanity", cJSON_Duplicate(in->sanity, 1));
	cJSON_AddNumberToObject(rep, "runtime_s", pyround(in->runtime_s, 1));
	free(g1.style);
	return rep;
fail:
	free(g1.style);
	cJSON_Delete(g1j);
	cJSON_Delete(g3j);
	cJSON_Delete(v8.items_cand);
	cJSON_Delete(v8.items_base);
	cJSON_Delete(v9.items_cand);
	cJSON_Delete(v9.items_base);
	cJSON_Delete(rep);
	return NULL;
}
