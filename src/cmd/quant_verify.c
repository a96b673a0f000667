/*
 * quant_verify.c - `lynn quant-verify` (SPEC §6): every quantized variant
 * answers the same prompts greedily; each output is compared with the
 * reference's (0.5·chrF/100 + 0.5·ROUGE-L F1) and checked for coherence.
 *
 *   lynn quant-verify --reference URL --variant LABEL=URL ... [--out-dir DIR]
 *   lynn quant-verify --reference-outputs REF.jsonl --variant-outputs LABEL=FILE.jsonl ...
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd.h"
#include "lynn/buf.h"
#include "lynn/client.h"
#include "lynn/engine.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/qverify.h"
#include "lynn/score.h"
#include "lynn/util.h"

#define QV_MAX_VARIANTS 32

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn quant-verify --reference PATH|URL --variant LABEL=PATH|URL ... [options]\n"
		"       lynn quant-verify --reference-outputs FILE.jsonl --variant-outputs LABEL=FILE.jsonl ...\n"
		"\n"
		"Is each quantized variant still the same model? Every variant answers the same\n"
		"prompts greedily (6 built-in bilingual prompts by default); per prompt the\n"
		"similarity to the reference is 0.5*chrF/100 + 0.5*ROUGE-L F1, and the output must\n"
		"pass the quality checks (length, script mix, readable share, repetition,\n"
		"gibberish, semantic anchors). A variant passes when it loads, every output is\n"
		"coherent and the mean similarity reaches --min-similarity. Report\n"
		"lynn-quant-verify-v2 (JSON + Markdown) in --out-dir.\n"
		"\n"
		"  --reference PATH|URL        the reference (BF16): a model folder (in-process, one\n"
		"                              model loaded at a time) or an OpenAI-compatible base URL\n"
		"  --variant LABEL=PATH|URL    a variant (repeatable)\n"
		"  --reference-outputs FILE    offline: reference outputs, JSONL {\"id\",\"output\"}\n"
		"  --variant-outputs LABEL=FILE offline: a variant's outputs (repeatable)\n"
		"  --prompts FILE              JSONL {\"prompt\", optional \"id\", \"anchors\", \"task\"}\n"
		"  --max-tokens N              new tokens per answer (default 64)\n"
		"  --min-similarity X          pass threshold on the mean (default 0.70)\n"
		"  --chrf-word-order 0|2       chrF (0, default) or chrF++ (2)\n"
		"  --out-dir DIR               where reports go (default reports)\n"
		"  --concurrency N, --timeout S, --retries N, --backoff S   endpoint settings\n"
		"  --threads N                 in-process worker threads (default: all cores)\n"
		"  --json                      print the report instead of the table\n"
		"  -q, -v                      quieter / more detail\n"
		"\n"
		"Exit: 0 every variant passes, 1 one failed (FAIL or LOAD_FAIL), 2 usage or bad\n"
		"input, 3 the reference could not be run (network failure after retries).\n");
}

static bool is_url(const char *s)
{
	return s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8));
}

struct variant {
	char label[128];
	const char *path;
	bool offline;
};

struct gen {
	char **text;
	double *latency;
	int *n_tok;
	bool *nonfinite;          /* in-process: NaN/Inf in the logits */
	struct lynn_eval_engine *ee;
};

static int on_out(void *ud, size_t i, const struct lynn_chat_out *o, struct lynn_err *err)
{
	struct gen *g = ud;
	g->text[i] = strdup(o->text ? o->text : "");
	if (!g->text[i])
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	lynn_eval_strip(g->text[i]);
	g->latency[i] = o->latency_s;
	g->n_tok[i] = o->completion_tokens;
	if (g->ee)
		g->nonfinite[i] = g->ee->last_nonfinite;
	return 0;
}

struct settings {
	int concurrency, retries, max_tokens, word_order, threads;
	double timeout_s, backoff_s, min_sim;
};

/* Outputs of one model source into g (n prompts). *load_s: time to reach it. */
static int run_source(const struct variant *v, const struct lynn_qv_prompt *p, size_t n,
		      const struct settings *st, struct gen *g, double *load_s, struct lynn_err *err)
{
	double t0 = lynn_now();
	int rc = 0;

	*load_s = 0;
	if (v->offline) {
		/* records {"id", "output"} matched by prompt id */
		char *data = NULL, *q, *nl;
		size_t len = 0, line = 0;
		if ((rc = lynn_file_read(v->path, 256u << 20, &data, &len, err)))
			return rc;
		for (q = data; q < data + len; q = nl + 1) {
			cJSON *o;
			const char *id, *out;
			nl = memchr(q, '\n', (size_t)(data + len - q));
			if (!nl)
				nl = data + len;
			line++;
			if (q + strspn(q, " \t\r\f\v") >= nl)
				continue;
			o = cJSON_ParseWithLength(q, (size_t)(nl - q));
			id = cJSON_GetStringValue(cJSON_GetObjectItem(o, "id"));
			out = cJSON_GetStringValue(cJSON_GetObjectItem(o, "output"));
			if (!o || !id || !out) {
				cJSON_Delete(o);
				free(data);
				return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: need a string 'id' and 'output'",
						 v->path, line);
			}
			for (size_t i = 0; i < n; i++) {
				if (strcmp(p[i].id, id))
					continue;
				free(g->text[i]);
				g->text[i] = strdup(out);
				if (g->text[i])
					lynn_eval_strip(g->text[i]);
				g->n_tok[i] = -1;
			}
			cJSON_Delete(o);
		}
		free(data);
		return 0;
	}
	if (is_url(v->path)) {
		struct lynn_client_opts o = { 0 };
		struct lynn_client *c;
		struct lynn_chat_req *reqs = calloc(n, sizeof(*reqs));
		const char *key = getenv("LYNN_API_KEY");
		if (!reqs)
			return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		o.urls = v->path;
		o.concurrency = st->concurrency;
		o.timeout_s = st->timeout_s;
		o.max_retries = st->retries;
		o.backoff_s = st->backoff_s;
		o.api_key = key && *key ? key : getenv("OPENAI_API_KEY");
		c = lynn_client_create(&o, err);
		if (!c) {
			free(reqs);
			return err ? err->code : -LYNN_EINVAL;
		}
		*load_s = lynn_now() - t0;
		for (size_t i = 0; i < n; i++) {
			reqs[i].prompt = p[i].prompt;
			reqs[i].max_tokens = st->max_tokens;
		}
		rc = lynn_client_run(c, reqs, n, on_out, g, err);
		lynn_client_free(c);
		free(reqs);
		return rc;
	}
	if (strstr(v->path, "://"))
		return lynn_errf(err, -LYNN_EINVAL, "quant-verify: '%s' is not an http(s) URL", v->path);
	if (!lynn_file_exists(v->path) && !lynn_dir_exists(v->path))
		return lynn_errf(err, -LYNN_ENOTFOUND, "quant-verify: '%s' not found", v->path);
	{
		/* in-process, one model loaded at a time */
		struct lynn_engine_opts eo = { st->threads, NULL };
		struct lynn_eval_engine ee = { 0 };
		struct lynn_chat_req *reqs = calloc(n, sizeof(*reqs));
		if (!reqs)
			return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		ee.engine = lynn_engine_open(v->path, &eo, err);
		if (!ee.engine) {
			free(reqs);
			return err ? err->code : -LYNN_EFORMAT;
		}
		*load_s = lynn_now() - t0;
		for (size_t i = 0; i < n; i++) {
			reqs[i].prompt = p[i].prompt;
			reqs[i].max_tokens = st->max_tokens;
		}
		g->ee = &ee;
		rc = lynn_eval_engine_gen(&ee, reqs, n, on_out, g, err);
		g->ee = NULL;
		lynn_engine_close(ee.engine);
		free(reqs);
		return rc;
	}
}

/* The result object of one variant. */
static cJSON *variant_result(const struct variant *v, const struct lynn_qv_prompt *p, size_t n,
			     const struct settings *st, char **ref, const struct gen *given,
			     double given_load_s, struct lynn_score_ctx *ctx, bool *pass,
			     struct lynn_err *err)
{
	struct gen g = { calloc(n, sizeof(char *)), calloc(n, sizeof(double)), calloc(n, sizeof(int)),
			 calloc(n, sizeof(bool)), NULL };
	cJSON *r = cJSON_CreateObject(), *items, *reasons;
	double load_s = 0, sum_sim = 0, sum_tps = 0;
	size_t n_coh = 0, n_tps = 0;
	struct lynn_err e = { 0 };
	int rc;

	*pass = false;
	cJSON_AddStringToObject(r, "label", v->label);
	cJSON_AddStringToObject(r, "path", v->path);
	if (!g.text || !g.latency || !g.n_tok || !g.nonfinite) {
		lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		cJSON_Delete(r);
		r = NULL;
		goto out;
	}
	lynn_log_info("quant-verify: %s: %s", v->label, v->path);
	if (given) {
		/* the reference itself: its outputs are already here */
		for (size_t i = 0; i < n; i++) {
			g.text[i] = given->text[i] ? strdup(given->text[i]) : NULL;
			g.latency[i] = given->latency[i];
			g.n_tok[i] = given->n_tok[i];
			g.nonfinite[i] = given->nonfinite[i];
		}
		load_s = given_load_s;
		rc = 0;
	} else {
		rc = run_source(v, p, n, st, &g, &load_s, &e);
	}
	if (rc == -LYNN_ENOMEM) {
		*err = e;
		cJSON_Delete(r);
		r = NULL;
		goto out;
	}
	cJSON_AddNumberToObject(r, "load_time_s", lynn_score_round(load_s, 1));
	if (rc) {
		lynn_log_warn("quant-verify: %s: %s", v->label, e.msg);
		cJSON_AddStringToObject(r, "verdict", "LOAD_FAIL");
		cJSON_AddStringToObject(r, "load_error", e.msg);
		cJSON_AddNumberToObject(r, "n_prompts", (double)n);
		cJSON_AddNumberToObject(r, "n_coherent", 0);
		cJSON_AddNullToObject(r, "mean_similarity");
		cJSON_AddItemToObject(r, "items", cJSON_CreateArray());
		goto out;
	}
	items = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++) {
		cJSON *it = cJSON_CreateObject(), *q;
		struct lynn_similarity sim = { 0 };
		const char *out = g.text[i] ? g.text[i] : "";
		bool ok = false;
		double tps = 0;
		cJSON_AddNumberToObject(it, "idx", (double)(i + 1));
		cJSON_AddStringToObject(it, "id", p[i].id);
		cJSON_AddStringToObject(it, "prompt", p[i].prompt);
		if (!g.text[i])
			cJSON_AddBoolToObject(it, "missing", 1);
		cJSON_AddStringToObject(it, "output", out);
		if (lynn_similarity(ctx, out, strlen(out), ref[i] ? ref[i] : "", ref[i] ? strlen(ref[i]) : 0,
				    st->word_order, 0, &sim, err)) {
			cJSON_Delete(it);
			cJSON_Delete(items);
			cJSON_Delete(r);
			r = NULL;
			goto out;
		}
		cJSON_AddNumberToObject(it, "similarity", lynn_score_round(sim.score, 4));
		cJSON_AddNumberToObject(it, "chrf", lynn_score_round(sim.chrf, 4));
		cJSON_AddNumberToObject(it, "rouge_l", lynn_score_round(sim.rouge_l, 4));
		sum_sim += sim.score;
		if (g.n_tok[i] >= 0) {
			tps = g.latency[i] > 0 ? g.n_tok[i] / g.latency[i] : 0;
			cJSON_AddNumberToObject(it, "n_tokens", g.n_tok[i]);
			sum_tps += tps;
			n_tps++;
		} else {
			cJSON_AddNullToObject(it, "n_tokens");
		}
		cJSON_AddNumberToObject(it, "latency_s", lynn_score_round(g.latency[i], 2));
		cJSON_AddNumberToObject(it, "tokens_per_sec", lynn_score_round(tps, 2));
		q = lynn_qv_quality(out, &p[i], &ok);
		if (!q) {
			lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
			cJSON_Delete(it);
			cJSON_Delete(items);
			cJSON_Delete(r);
			r = NULL;
			goto out;
		}
		if (!g.text[i] || g.nonfinite[i]) {
			ok = false;
			cJSON_AddItemToArray(cJSON_GetObjectItem(q, "reasons"),
					     cJSON_CreateString(g.text[i] ? "nan_or_inf_logits" : "missing_output"));
			cJSON_ReplaceItemInObject(q, "pass", cJSON_CreateFalse());
		}
		cJSON_AddBoolToObject(it, "nonfinite_logits", g.nonfinite[i]);
		cJSON_AddBoolToObject(it, "coherent", ok);
		cJSON_AddItemToObject(it, "quality", q);
		n_coh += ok;
		cJSON_AddItemToArray(items, it);
	}
	{
		double mean = n ? sum_sim / (double)n : 0;
		bool sim_ok = mean >= st->min_sim;
		char buf[96];
		*pass = n_coh == n && sim_ok;
		reasons = cJSON_CreateArray();
		if (n_coh != n) {
			snprintf(buf, sizeof(buf), "incoherent_outputs:%zu/%zu", n - n_coh, n);
			cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
		}
		if (!sim_ok) {
			snprintf(buf, sizeof(buf), "mean_similarity:%.4f<%.2f", mean, st->min_sim);
			cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
		}
		cJSON_AddStringToObject(r, "verdict", *pass ? "PASS" : "FAIL");
		cJSON_AddItemToObject(r, "reasons", reasons);
		cJSON_AddNumberToObject(r, "n_prompts", (double)n);
		cJSON_AddNumberToObject(r, "n_coherent", (double)n_coh);
		cJSON_AddBoolToObject(r, "all_coherent", n_coh == n);
		cJSON_AddNumberToObject(r, "mean_similarity", lynn_score_round(mean, 4));
		if (n_tps)
			cJSON_AddNumberToObject(r, "avg_tokens_per_sec", lynn_score_round(sum_tps / (double)n_tps, 2));
		else
			cJSON_AddNullToObject(r, "avg_tokens_per_sec");
		cJSON_AddItemToObject(r, "items", items);
	}
out:
	if (g.text)
		for (size_t i = 0; i < n; i++)
			free(g.text[i]);
	free(g.text);
	free(g.latency);
	free(g.n_tok);
	free(g.nonfinite);
	return r;
}

static char *markdown(const cJSON *rep)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	const cJSON *r, *it;
	lynn_buf_printf(&b, "# lynn quant-verify — %s\n\n", cJSON_GetStringValue(cJSON_GetObjectItem(rep, "verdict")));
	lynn_buf_printf(&b, "min similarity %.2f, %d prompts, created %s\n\n",
			cJSON_GetNumberValue(cJSON_GetObjectItem(rep, "min_similarity")),
			cJSON_GetArraySize(cJSON_GetObjectItem(rep, "prompts")),
			cJSON_GetStringValue(cJSON_GetObjectItem(rep, "created_at")));
	lynn_buf_puts(&b, "| variant | verdict | coherent | mean similarity | tok/s | reasons | path |\n|---|---|---|---|---|---|---|\n");
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(rep, "results")) {
		const cJSON *ms = cJSON_GetObjectItem(r, "mean_similarity"), *tp = cJSON_GetObjectItem(r, "avg_tokens_per_sec"), *x;
		struct lynn_buf rs = LYNN_BUF_INIT;
		cJSON_ArrayForEach(x, cJSON_GetObjectItem(r, "reasons")) lynn_buf_printf(&rs, "%s%s", rs.len ? ", " : "", x->valuestring);
		if (cJSON_GetObjectItem(r, "load_error"))
			lynn_buf_printf(&rs, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(r, "load_error")));
		lynn_buf_printf(&b, "| %s | %s | %d/%d | ", cJSON_GetStringValue(cJSON_GetObjectItem(r, "label")),
				cJSON_GetStringValue(cJSON_GetObjectItem(r, "verdict")),
				(int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "n_coherent")),
				(int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "n_prompts")));
		if (cJSON_IsNumber(ms))
			lynn_buf_printf(&b, "%.4f | ", ms->valuedouble);
		else
			lynn_buf_puts(&b, "– | ");
		if (cJSON_IsNumber(tp))
			lynn_buf_printf(&b, "%.1f | ", tp->valuedouble);
		else
			lynn_buf_puts(&b, "– | ");
		for (char *c = rs.data; c && *c; c++)
			if (*c == '|' || *c == '\n')
				*c = ' ';
		lynn_buf_printf(&b, "%s | `%s` |\n", rs.data ? rs.data : "", cJSON_GetStringValue(cJSON_GetObjectItem(r, "path")));
		lynn_buf_release(&rs);
	}
	lynn_buf_puts(&b, "\n## Per prompt\n\n| variant | id | similarity | chrF | ROUGE-L | coherent | reasons |\n|---|---|---|---|---|---|---|\n");
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(rep, "results")) {
		cJSON_ArrayForEach(it, cJSON_GetObjectItem(r, "items")) {
			const cJSON *x;
			struct lynn_buf rs = LYNN_BUF_INIT;
			cJSON_ArrayForEach(x, cJSON_GetObjectItem(cJSON_GetObjectItem(it, "quality"), "reasons"))
				lynn_buf_printf(&rs, "%s%s", rs.len ? ", " : "", x->valuestring);
			lynn_buf_printf(&b, "| %s | %s | %.4f | %.2f | %.4f | %s | %s |\n",
					cJSON_GetStringValue(cJSON_GetObjectItem(r, "label")),
					cJSON_GetStringValue(cJSON_GetObjectItem(it, "id")),
					cJSON_GetNumberValue(cJSON_GetObjectItem(it, "similarity")),
					cJSON_GetNumberValue(cJSON_GetObjectItem(it, "chrf")),
					cJSON_GetNumberValue(cJSON_GetObjectItem(it, "rouge_l")),
					cJSON_IsTrue(cJSON_GetObjectItem(it, "coherent")) ? "yes" : "NO", rs.data ? rs.data : "");
			lynn_buf_release(&rs);
		}
	}
	return lynn_buf_detach(&b);
}

static int parse_label(const char *arg, const char *flag, struct variant *v)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !eq[1] || (size_t)(eq - arg) >= sizeof(v->label))
		return cmd_usage_error("quant-verify", "%s: '%s' is not LABEL=PATH", flag, arg);
	snprintf(v->label, sizeof(v->label), "%.*s", (int)(eq - arg), arg);
	v->path = eq + 1;
	return 0;
}

int cmd_quant_verify(int argc, char **argv)
{
	enum { O_REF = 256, O_VAR, O_REFOUT, O_VAROUT, O_PROMPTS, O_MAXTOK, O_MINSIM, O_WO, O_OUTDIR, O_CONC,
	       O_TIMEOUT, O_RETRIES, O_BACKOFF, O_JSON, O_THREADS };
	static const struct option lo[] = {
		{ "reference", required_argument, NULL, O_REF },
		{ "variant", required_argument, NULL, O_VAR },
		{ "reference-outputs", required_argument, NULL, O_REFOUT },
		{ "variant-outputs", required_argument, NULL, O_VAROUT },
		{ "prompts", required_argument, NULL, O_PROMPTS },
		{ "max-tokens", required_argument, NULL, O_MAXTOK },
		{ "min-similarity", required_argument, NULL, O_MINSIM },
		{ "chrf-word-order", required_argument, NULL, O_WO },
		{ "out-dir", required_argument, NULL, O_OUTDIR },
		{ "concurrency", required_argument, NULL, O_CONC },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "retries", required_argument, NULL, O_RETRIES },
		{ "backoff", required_argument, NULL, O_BACKOFF },
		{ "json", no_argument, NULL, O_JSON },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct variant ref = { "reference", NULL, false }, vars[QV_MAX_VARIANTS];
	struct settings st = { 6, 5, LYNN_QV_DEFAULT_MAX_TOKENS, 0, 0, 600, 1, LYNN_QV_DEFAULT_MIN_SIMILARITY };
	const char *prompts_file = NULL, *out_dir = "reports";
	struct lynn_qv_prompt *owned = NULL;
	const struct lynn_qv_prompt *p = NULL;
	size_t n = 0;
	int nv = 0, c, status = 3, n_online = 0, n_offline = 0;
	bool json = false, all_pass = true;
	struct lynn_err err = { 0 };
	struct lynn_score_ctx *ctx = NULL;
	struct gen rg = { 0 };
	cJSON *rep = NULL, *results, *pa;
	char *md = NULL, *jpath = NULL, *mpath = NULL;
	double ref_load_s = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hqv", lo, NULL)) != -1) {
		char *end;
		double d;
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case O_REF: ref.path = optarg; ref.offline = false; n_online++; break;
		case O_REFOUT: ref.path = optarg; ref.offline = true; n_offline++; break;
		case O_VAR:
		case O_VAROUT:
			if (nv == QV_MAX_VARIANTS)
				return cmd_usage_error("quant-verify", "at most %d variants", QV_MAX_VARIANTS);
			if (parse_label(optarg, c == O_VAR ? "--variant" : "--variant-outputs", &vars[nv]))
				return 2;
			vars[nv].offline = c == O_VAROUT;
			nv++;
			break;
		case O_PROMPTS: prompts_file = optarg; break;
		case O_OUTDIR: out_dir = optarg; break;
		case O_JSON: json = true; break;
		default:
			if (c == '?' || !optarg)
				return cmd_usage_error("quant-verify", "unknown or incomplete option '%s'", argv[optind - 1]);
			errno = 0;
			d = strtod(optarg, &end);
			if (errno || end == optarg || *end)
				return cmd_usage_error("quant-verify", "'%s' is not a number", optarg);
			if (c == O_MAXTOK && d >= 1 && d <= 1 << 20)
				st.max_tokens = (int)d;
			else if (c == O_MINSIM && d >= 0 && d <= 1)
				st.min_sim = d;
			else if (c == O_WO && (d == 0 || d == 2))
				st.word_order = (int)d;
			else if (c == O_CONC && d >= 1 && d <= 1024)
				st.concurrency = (int)d;
			else if (c == O_TIMEOUT && d > 0)
				st.timeout_s = d;
			else if (c == O_RETRIES && d >= 0 && d <= 100)
				st.retries = (int)d;
			else if (c == O_BACKOFF && d >= 0 && d <= 60)
				st.backoff_s = d;
			else if (c == O_THREADS && d >= 0 && d <= 4096)
				st.threads = (int)d;
			else
				return cmd_usage_error("quant-verify", "'%s': value out of range", optarg);
		}
	}
	if (optind < argc)
		return cmd_usage_error("quant-verify", "unexpected argument '%s'", argv[optind]);
	if (!ref.path)
		return cmd_usage_error("quant-verify", "--reference or --reference-outputs is required");
	if (n_online + n_offline > 1)
		return cmd_usage_error("quant-verify", "give one reference");
	if (!nv)
		return cmd_usage_error("quant-verify", "no --variant / --variant-outputs");
	if (prompts_file) {
		if (lynn_qv_prompts_load(prompts_file, &owned, &n, &err))
			return cmd_fail(&err);
		p = owned;
	} else {
		n = lynn_qv_builtin_prompts(&p);
	}
	if (!ref.offline && !is_url(ref.path) && strstr(ref.path, "://"))
		return cmd_usage_error("quant-verify", "'%s' is not an http(s) URL", ref.path);
	if (!ref.offline && !is_url(ref.path) && !lynn_file_exists(ref.path) && !lynn_dir_exists(ref.path)) {
		lynn_errf(&err, -LYNN_ENOTFOUND, "quant-verify: reference '%s' not found", ref.path);
		status = cmd_fail(&err);
		goto out;
	}
	if (ref.offline && !lynn_file_exists(ref.path)) {
		lynn_errf(&err, -LYNN_ENOTFOUND, "quant-verify: reference outputs '%s' not found", ref.path);
		status = cmd_fail(&err);
		goto out;
	}
	ctx = lynn_score_ctx_create(&err);
	if (!ctx) {
		status = cmd_fail(&err);
		goto out;
	}
	/* the reference's outputs first: everything is compared with them */
	rg.text = calloc(n, sizeof(char *));
	rg.latency = calloc(n, sizeof(double));
	rg.n_tok = calloc(n, sizeof(int));
	rg.nonfinite = calloc(n, sizeof(bool));
	{
		double load_s;
		int rc = rg.text && rg.latency && rg.n_tok && rg.nonfinite ? run_source(&ref, p, n, &st, &rg, &load_s, &err)
							   : lynn_errf(&err, -LYNN_ENOMEM, "quant-verify: out of memory");
		if (rc) {
			status = cmd_fail(&err);
			goto out;
		}
		ref_load_s = load_s;
	}
	rep = lynn_json_report_new(LYNN_QV_SCHEMA);
	cJSON_AddNumberToObject(rep, "n_variants", nv + 1);
	cJSON_AddNumberToObject(rep, "min_similarity", st.min_sim);
	cJSON_AddNumberToObject(rep, "max_tokens", st.max_tokens);
	cJSON_AddStringToObject(rep, "similarity", st.word_order ? "0.5*chrF++/100 + 0.5*ROUGE-L F1" : "0.5*chrF/100 + 0.5*ROUGE-L F1");
	pa = cJSON_AddArrayToObject(rep, "prompts");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(pa, cJSON_CreateString(p[i].prompt));
	cJSON_AddStringToObject(rep, "verdict", "PASS");
	results = cJSON_AddArrayToObject(rep, "results");
	for (int k = -1; k < nv; k++) {
		bool pass;
		cJSON *r;
		/* the reference against itself first: similarity 1, quality still checked */
		r = variant_result(k < 0 ? &ref : &vars[k], p, n, &st, rg.text, k < 0 ? &rg : NULL, ref_load_s,
				   ctx, &pass, &err);
		if (!r) {
			status = cmd_fail(&err);
			goto out;
		}
		all_pass &= pass;
		cJSON_AddItemToArray(results, r);
	}
	cJSON_ReplaceItemInObject(rep, "verdict", cJSON_CreateString(all_pass ? "PASS" : "FAIL"));
	{
		char ts[32];
		time_t now = time(NULL);
		struct tm tmv;
		localtime_r(&now, &tmv);
		strftime(ts, sizeof(ts), "%Y%m%dT%H%M%S", &tmv);
		if (mkdir(out_dir, 0755) && errno != EEXIST) {
			lynn_errf(&err, -LYNN_EIO, "quant-verify: cannot create '%s': %s", out_dir, strerror(errno));
			status = cmd_fail(&err);
			goto out;
		}
		if (asprintf(&jpath, "%s/quant_verify_%s.json", out_dir, ts) < 0 ||
		    asprintf(&mpath, "%s/quant_verify_%s.md", out_dir, ts) < 0) {
			jpath = mpath = NULL;
			lynn_errf(&err, -LYNN_ENOMEM, "quant-verify: out of memory");
			status = cmd_fail(&err);
			goto out;
		}
	}
	md = markdown(rep);
	if (lynn_json_write(jpath, rep, &err) || lynn_write_atomic(mpath, md, strlen(md), &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	if (json) {
		char *s = lynn_json_print_pretty(rep);
		fputs(s ? s : "", stdout);
		free(s);
	} else {
		const char *tbl = strstr(md, "| variant |"), *end = strstr(md, "\n## Per prompt");
		printf("%.*s\nverdict: %s\nreport: %s\nsummary: %s\n", (int)(end - tbl), tbl,
		       all_pass ? "PASS" : "FAIL", jpath, mpath);
	}
	status = all_pass ? 0 : 1;
out:
	if (rg.text)
		for (size_t i = 0; i < n; i++)
			free(rg.text[i]);
	free(rg.text);
	free(rg.latency);
	free(rg.n_tok);
	free(rg.nonfinite);
	lynn_qv_prompts_free(owned, owned ? n : 0);
	lynn_score_ctx_free(ctx);
	cJSON_Delete(rep);
	free(md);
	free(jpath);
	free(mpath);
	return status;
}
