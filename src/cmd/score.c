/*
 * score.c - `lynn score`: per-segment and corpus scores of hypotheses
 * against references (SPEC §2): chrF, chrF++, ROUGE-L, the composite
 * similarity, the g3 reference similarity and the g1 style rules.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/score.h"

#define SCORE_MAX_FILE (1ull << 31)

enum metric { M_CHRF, M_CHRFPP, M_ROUGEL, M_COMPOSITE, M_REFSIM, M_STYLE };
static const char *const metric_names[] = { "chrf", "chrf++", "rougeL", "composite", "refsim",
					    "style" };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn score --metric chrf|chrf++|rougeL|composite|refsim|style\n"
		"                  --hyp FILE [--ref FILE] [--prompt FILE] [--json]\n"
		"                  [--stem] [--ascii-only] [--cliches FILE]\n\n"
		"Scores each hypothesis against its reference and prints one score per\n"
		"segment, then the corpus score.\n\n"
		"  --metric M      chrf (sacreBLEU chrF, 0-100), chrf++ (word order 2),\n"
		"                  rougeL (ROUGE-L F1, 0-1), composite (0.5*chrF/100 +\n"
		"                  0.5*ROUGE-L), refsim (g3 reference similarity, 0-1),\n"
		"                  style (g1 rules passed / 5, 0-1)\n"
		"  --hyp FILE      one segment per line; or JSONL (name ending in .jsonl, or\n"
		"                  --jsonl) with records {\"hyp\", \"ref\"[, \"prompt\"]}\n"
		"  --ref FILE      one reference per line (plain --hyp; not for style)\n"
		"  --prompt FILE   one prompt per line (refsim, style: format rule)\n"
		"  --jsonl         read --hyp as JSONL whatever its name\n"
		"  --json          print {\"metric\", \"scores\":[...], \"corpus\"}\n"
		"  --stem          ROUGE-L with the Porter stemmer (rougeL, composite)\n"
		"  --ascii-only    ROUGE-L exactly as rouge-score: drop non-ASCII letters\n"
		"  --cliches FILE  cliché openings, one per line (refsim, style)\n"
		"  -q, -v          quieter / more verbose logs\n\n"
		"corpus: chrF/chrF++ from the summed n-gram statistics (sacreBLEU\n"
		"corpus_score); the other metrics: the mean of the segment scores.\n"
		"Exit codes: 0 ok, 2 usage or bad input, 3 runtime failure.\n");
}

struct seg {
	const char *hyp, *ref, *prompt;
	size_t hyp_len, ref_len, prompt_len;
};

struct lines {
	char *data;
	size_t n;
	const char **s;
	size_t *len;
};

static void lines_free(struct lines *l)
{
	free(l->data);
	free(l->s);
	free(l->len);
	memset(l, 0, sizeof *l);
}

/* Split a file into lines ('\n'; a final newline ends the last line). */
static int lines_read(const char *path, struct lines *l, struct lynn_err *err)
{
	size_t len, cap = 0, i, start = 0;
	int rc;
	memset(l, 0, sizeof *l);
	if ((rc = lynn_file_read(path, SCORE_MAX_FILE, &l->data, &len, err)))
		return rc;
	for (i = 0; i < len; i++)
		if (l->data[i] == '\n')
			cap++;
	cap += 2;
	l->s = malloc(cap * sizeof *l->s);
	l->len = malloc(cap * sizeof *l->len);
	if (!l->s || !l->len)
		return lynn_errf(err, -LYNN_ENOMEM, "score: out of memory reading '%s'", path);
	for (i = 0; i <= len; i++) {
		if (i == len && start == len)
			break;
		if (i == len || l->data[i] == '\n') {
			l->s[l->n] = l->data + start;
			l->len[l->n++] = i - start;
			start = i + 1;
		}
	}
	return 0;
}

static int jsonl_read(const char *path, cJSON ***recs_out, size_t *n_out, struct seg **segs_out,
		      bool need_ref, struct lynn_err *err)
{
	struct lines l;
	cJSON **recs = NULL;
	struct seg *segs = NULL;
	size_t n = 0;
	int rc = lines_read(path, &l, err);
	if (rc)
		goto out;
	recs = calloc(l.n + 1, sizeof *recs);
	segs = calloc(l.n + 1, sizeof *segs);
	if (!recs || !segs) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "score: out of memory reading '%s'", path);
		goto out;
	}
	for (size_t i = 0; i < l.n; i++) {
		char what[512];
		const char *keys[3] = { "hyp", "ref", "prompt" };
		const char **dst[3];
		size_t *dlen[3];
		bool blank = true;
		cJSON *j;
		for (size_t k = 0; k < l.len[i]; k++)
			if (!strchr(" \t\r", l.s[i][k]))
				blank = false;
		if (blank)
			continue;
		snprintf(what, sizeof what, "'%s' line %zu", path, i + 1);
		j = lynn_json_parse(what, l.s[i], l.len[i], err);
		if (!j) {
			rc = err->code;
			goto out;
		}
		recs[n] = j;
		if (!cJSON_IsObject(j)) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "score: %s: not a JSON object", what);
			goto out;
		}
		dst[0] = &segs[n].hyp;
		dst[1] = &segs[n].ref;
		dst[2] = &segs[n].prompt;
		dlen[0] = &segs[n].hyp_len;
		dlen[1] = &segs[n].ref_len;
		dlen[2] = &segs[n].prompt_len;
		for (int k = 0; k < 3; k++) {
			bool req = k == 0 || (k == 1 && need_ref);
			if ((rc = lynn_json_get_str(j, keys[k], req, dst[k], what, err)))
				goto out;
			if (!*dst[k])
				*dst[k] = "";
			*dlen[k] = strlen(*dst[k]);
		}
		n++;
	}
	*recs_out = recs;
	*segs_out = segs;
	*n_out = n;
	recs = NULL;
	segs = NULL;
out:
	if (recs)
		for (size_t i = 0; i < l.n + 1; i++)
			cJSON_Delete(recs[i]);
	free(recs);
	free(segs);
	lines_free(&l);
	return rc;
}

static cJSON *features_json(const struct lynn_text_features *f)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "headers", f->headers);
	cJSON_AddNumberToObject(o, "bullets", f->bullets);
	cJSON_AddNumberToObject(o, "code_blocks", f->code_blocks);
	cJSON_AddNumberToObject(o, "tables", f->tables);
	cJSON_AddNumberToObject(o, "paragraphs", f->paragraphs);
	cJSON_AddNumberToObject(o, "numbers", f->numbers);
	return o;
}

static cJSON *style_json(const struct lynn_style_result *s)
{
	cJSON *o = cJSON_CreateObject(), *rules = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "score", s->pass_ratio);
	for (int r = 0; r < LYNN_STYLE_N_RULES; r++)
		cJSON_AddBoolToObject(rules, lynn_style_rule_name(r), s->rules[r]);
	cJSON_AddItemToObject(o, "rules", rules);
	cJSON_AddNumberToObject(o, "n_rule_pass", s->n_pass);
	cJSON_AddBoolToObject(o, "overall_pass", s->overall_pass);
	return o;
}

static cJSON *refsim_json(const struct lynn_refsim *r)
{
	cJSON *o = cJSON_CreateObject(), *c;
	cJSON_AddNumberToObject(o, "score", r->score);
	if (!r->has_reference) {
		cJSON_AddStringToObject(o, "mode", "rule_fallback");
		c = cJSON_CreateObject();
		for (int k = 0; k < LYNN_STYLE_N_RULES; k++)
			cJSON_AddBoolToObject(c, lynn_style_rule_name(k), r->style.rules[k]);
		cJSON_AddItemToObject(o, "components", c);
		return o;
	}
	cJSON_AddStringToObject(o, "mode", "reference_similarity");
	c = cJSON_CreateObject();
	cJSON_AddNumberToObject(c, "trigram_f1", lynn_score_round(r->trigram_f1, 4));
	cJSON_AddNumberToObject(c, "bigram_f1", lynn_score_round(r->bigram_f1, 4));
	cJSON_AddNumberToObject(c, "sequence", lynn_score_round(r->sequence, 4));
	cJSON_AddNumberToObject(c, "number_f1", lynn_score_round(r->number_f1, 4));
	cJSON_AddNumberToObject(c, "term_f1", lynn_score_round(r->term_f1, 4));
	cJSON_AddNumberToObject(c, "structure", lynn_score_round(r->structure, 4));
	cJSON_AddNumberToObject(c, "floor_penalty", lynn_score_round(r->floor_penalty, 4));
	cJSON_AddItemToObject(o, "components", c);
	cJSON_AddItemToObject(o, "output_features", features_json(&r->out_features));
	cJSON_AddItemToObject(o, "reference_features", features_json(&r->ref_features));
	return o;
}

int cmd_score(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "metric", required_argument, NULL, 'm' },
		{ "hyp", required_argument, NULL, 'H' },
		{ "ref", required_argument, NULL, 'R' },
		{ "prompt", required_argument, NULL, 'P' },
		{ "cliches", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "jsonl", no_argument, NULL, 'J' },
		{ "stem", no_argument, NULL, 's' },
		{ "ascii-only", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *metric_s = NULL, *hyp_p = NULL, *ref_p = NULL, *prompt_p = NULL, *cliche_p = NULL;
	bool json = false, jsonl = false;
	unsigned rflags = 0;
	int opt, metric = -1, rc = 0, status = 0;
	struct lines lh = { 0 }, lr = { 0 }, lp = { 0 }, lc = { 0 };
	cJSON **recs = NULL, *out = NULL, *scores = NULL;
	struct seg *segs = NULL;
	size_t n = 0;
	struct lynn_err err = { 0 };
	struct lynn_score_ctx *ctx = NULL;
	struct lynn_chrf_opts copt = LYNN_CHRF_OPTS_DEFAULT;
	struct lynn_chrf_stats corpus_st = { 0 };
	struct lynn_style_opts sopt = { NULL, 0 };
	char **cl = NULL;
	double sum = 0.0, corpus;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		switch (opt) {
		case 'm': metric_s = optarg; break;
		case 'H': hyp_p = optarg; break;
		case 'R': ref_p = optarg; break;
		case 'P': prompt_p = optarg; break;
		case 'C': cliche_p = optarg; break;
		case 'j': json = true; break;
		case 'J': jsonl = true; break;
		case 's': rflags |= LYNN_ROUGE_F_STEM; break;
		case 'a': rflags |= LYNN_ROUGE_F_ASCII_ONLY; break;
		case 'h': usage(stdout); return 0;
		default:
			if (cmd_common_opt(opt))
				break;
			return cmd_usage_error("score", "unknown or incomplete option '%s'",
					       argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cmd_usage_error("score", "unexpected argument '%s'", argv[optind]);
	if (!metric_s)
		return cmd_usage_error("score", "--metric is required");
	for (int k = 0; k < (int)(sizeof metric_names / sizeof *metric_names); k++)
		if (!strcmp(metric_s, metric_names[k]))
			metric = k;
	if (metric < 0)
		return cmd_usage_error("score", "unknown metric '%s' (chrf, chrf++, rougeL, "
					      "composite, refsim, style)", metric_s);
	if (!hyp_p)
		return cmd_usage_error("score", "--hyp is required");
	if (strlen(hyp_p) > 6 && !strcmp(hyp_p + strlen(hyp_p) - 6, ".jsonl"))
		jsonl = true;
	if (!jsonl && !ref_p && metric != M_STYLE)
		return cmd_usage_error("score", "--ref is required with a plain --hyp file");

	if (jsonl) {
		if (ref_p || prompt_p)
			return cmd_usage_error("score", "--ref/--prompt come from the JSONL records");
		rc = jsonl_read(hyp_p, &recs, &n, &segs, metric != M_STYLE, &err);
		if (rc)
			goto fail;
	} else {
		if ((rc = lines_read(hyp_p, &lh, &err)))
			goto fail;
		if (ref_p && (rc = lines_read(ref_p, &lr, &err)))
			goto fail;
		if (prompt_p && (rc = lines_read(prompt_p, &lp, &err)))
			goto fail;
		if (ref_p && lr.n != lh.n) {
			rc = lynn_errf(&err, -LYNN_EFORMAT, "score: '%s' has %zu lines but '%s' has %zu",
				       hyp_p, lh.n, ref_p, lr.n);
			goto fail;
		}
		if (prompt_p && lp.n != lh.n) {
			rc = lynn_errf(&err, -LYNN_EFORMAT, "score: '%s' has %zu lines but '%s' has %zu",
				       hyp_p, lh.n, prompt_p, lp.n);
			goto fail;
		}
		n = lh.n;
		segs = calloc(n + 1, sizeof *segs);
		if (!segs) {
			rc = lynn_errf(&err, -LYNN_ENOMEM, "score: out of memory");
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			segs[i].hyp = lh.s[i];
			segs[i].hyp_len = lh.len[i];
			segs[i].ref = ref_p ? lr.s[i] : "";
			segs[i].ref_len = ref_p ? lr.len[i] : 0;
			segs[i].prompt = prompt_p ? lp.s[i] : "";
			segs[i].prompt_len = prompt_p ? lp.len[i] : 0;
		}
	}
	if (cliche_p) {
		if ((rc = lines_read(cliche_p, &lc, &err)))
			goto fail;
		cl = calloc(lc.n + 1, sizeof *cl);
		if (!cl) {
			rc = lynn_errf(&err, -LYNN_ENOMEM, "score: out of memory");
			goto fail;
		}
		for (size_t i = 0; i < lc.n; i++) {
			if (lc.len[i] == 0)
				continue;
			cl[sopt.n_cliches] = strndup(lc.s[i], lc.len[i]);
			if (!cl[sopt.n_cliches++]) {
				rc = lynn_errf(&err, -LYNN_ENOMEM, "score: out of memory");
				goto fail;
			}
		}
		if (sopt.n_cliches == 0) {
			rc = lynn_errf(&err, -LYNN_EFORMAT, "score: '%s' lists no cliché", cliche_p);
			goto fail;
		}
		sopt.cliches = (const char *const *)cl;
	}

	if (!(ctx = lynn_score_ctx_create(&err))) {
		rc = err.code;
		goto fail;
	}
	out = cJSON_CreateObject();
	scores = cJSON_CreateArray();
	if (!out || !scores) {
		rc = lynn_errf(&err, -LYNN_ENOMEM, "score: out of memory");
		goto fail;
	}
	if (metric == M_CHRFPP)
		copt.word_order = 2;
	for (size_t i = 0; i < n; i++) {
		const struct seg *s = &segs[i];
		double v = 0.0;
		cJSON *item = NULL;
		switch (metric) {
		case M_CHRF:
		case M_CHRFPP: {
			struct lynn_chrf_stats st;
			rc = lynn_chrf_stats_compute(ctx, &copt, s->hyp, s->hyp_len, s->ref, s->ref_len,
						     &st, &err);
			if (rc)
				goto fail;
			lynn_chrf_stats_add(&corpus_st, &st);
			v = lynn_chrf_stats_score(&copt, &st);
			break;
		}
		case M_ROUGEL: {
			struct lynn_rouge r;
			rc = lynn_rouge_l(ctx, s->hyp, s->hyp_len, s->ref, s->ref_len, rflags, &r, &err);
			if (rc)
				goto fail;
			v = r.fmeasure;
			break;
		}
		case M_COMPOSITE: {
			struct lynn_similarity sim;
			rc = lynn_similarity(ctx, s->hyp, s->hyp_len, s->ref, s->ref_len, 0, rflags,
					     &sim, &err);
			if (rc)
				goto fail;
			v = sim.score;
			break;
		}
		case M_REFSIM: {
			struct lynn_refsim r;
			rc = lynn_refsim_score(ctx, &sopt, s->prompt, s->prompt_len, s->hyp, s->hyp_len,
					       s->ref, s->ref_len, &r, &err);
			if (rc)
				goto fail;
			v = r.score;
			item = refsim_json(&r);
			break;
		}
		case M_STYLE: {
			struct lynn_style_result r;
			rc = lynn_style_score(&sopt, s->prompt, s->prompt_len, s->hyp, s->hyp_len, &r,
					      &err);
			if (rc)
				goto fail;
			v = r.pass_ratio;
			item = style_json(&r);
			break;
		}
		}
		sum += v;
		if (json)
			cJSON_AddItemToArray(scores, item ? item : cJSON_CreateNumber(v));
		else {
			cJSON_Delete(item);
			printf("%.6f\n", v);
		}
	}
	if (metric == M_CHRF || metric == M_CHRFPP)
		corpus = n ? lynn_chrf_stats_score(&copt, &corpus_st) : 0.0;
	else
		corpus = n ? sum / (double)n : 0.0;
	if (json) {
		char *txt;
		cJSON_AddStringToObject(out, "metric", metric_names[metric]);
		cJSON_AddItemToObject(out, "scores", scores);
		scores = NULL;
		cJSON_AddNumberToObject(out, "corpus", corpus);
		cJSON_AddNumberToObject(out, "n", (double)n);
		txt = lynn_json_print_pretty(out);
		if (!txt) {
			rc = lynn_errf(&err, -LYNN_ENOMEM, "score: out of memory");
			goto fail;
		}
		fputs(txt, stdout);
		free(txt);
	} else {
		printf("corpus %.6f\n", corpus);
	}
	goto done;
fail:
	status = cmd_fail(&err);
done:
	if (recs)
		for (size_t i = 0; i < n; i++)
			cJSON_Delete(recs[i]);
	free(recs);
	free(segs);
	if (cl)
		for (size_t i = 0; i < sopt.n_cliches; i++)
			free(cl[i]);
	free(cl);
	cJSON_Delete(out);
	cJSON_Delete(scores);
	lynn_score_ctx_free(ctx);
	lines_free(&lh);
	lines_free(&lr);
	lines_free(&lp);
	lines_free(&lc);
	(void)rc;
	return status;
}
