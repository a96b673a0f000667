/*
 * eval.c - `lynn eval`: the four-gate ship verdict (SPEC §5), and with
 * --suite the daily-mix comparison of several models.
 *
 *   lynn eval --model URL|DIR [--adapter NAME|DIR] [--base URL|DIR] ...
 *   lynn eval --suite v8,v9 --model A [--model B ...] [--label NAME ...]
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"
#include "lynn/buf.h"
#include "lynn/engine.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/util.h"

#define MAX_MODELS 16

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn eval --model PATH|URL [--adapter DIR|NAME] [--base PATH|URL] [options]\n"
		"       lynn eval --suite v8,v9 --model A [--model B ...] [--label NAME ...] [--think]\n"
		"\n"
		"The four-gate ship verdict (schema lynn-4gate-v1): g1 style on the style set,\n"
		"g2 regression on v8 (tool calling) and v9 (gold answers), g3 parity against the\n"
		"baseline; NET_WIN or ABORT. The last stdout line is __FOUR_GATE_PASS__ or\n"
		"__FOUR_GATE_FAIL__.\n"
		"\n"
		"model sources:\n"
		"  --model PATH|URL     candidate: an OpenAI-compatible base URL (http://host:port/v1;\n"
		"                       comma-separated URLs are replicas), a model folder or a .gguf\n"
		"                       file (in-process)\n"
		"  --adapter DIR|NAME   LoRA adapter: a PEFT folder (in-process) or, with a URL, the\n"
		"                       served adapter's model name\n"
		"  --base PATH|URL      baseline (default: --model without the adapter)\n"
		"prompts:\n"
		"  --prompts FILE       style set (default: v4_distill_verify_35_v2.jsonl, else\n"
		"                       v4_distill_verify_35.jsonl, in the prompts dir)\n"
		"  --prompts-dir DIR    regression sets (default: ./prompts, else the project's)\n"
		"report:\n"
		"  --output FILE        write the report here (Markdown and cache beside it)\n"
		"  --out-dir DIR        else DIR/4gate_TAG_TIMESTAMP.json + DIR/4gate_results.json\n"
		"                       (default: reports)\n"
		"  --model-tag TAG      report tag (default: adapter or model name)\n"
		"  --runner NAME        report's runner field (default: remote or local)\n"
		"  --sanity-json FILE   lynn-diff-sanity-v1 report whose 'pass' the verdict needs\n"
		"  --sanity-pass        sanity passed (when no --sanity-json)\n"
		"generation:\n"
		"  --concurrency N      requests in flight (default 8); in-process: generated together\n"
		"  --timeout S          per-request limit in seconds (default 600)\n"
		"  --retries N          retries on 429, 5xx, timeouts, connection errors (default 5)\n"
		"  --backoff S          first retry delay, doubled per retry (default 1)\n"
		"  --resume             reuse the output cache of an earlier run\n"
		"  --think              thinking on (reasoning kept apart from the graded answer)\n"
		"  --threads N          in-process: worker threads (default: all cores)\n"
		"  --device D           in-process: cpu, cuda or auto (default auto: the GPU when there is one)\n"
		"daily-mix:\n"
		"  --suite v8,v9        compare models (repeat --model, optional --label each)\n"
		"  --json               print the daily-mix report as JSON\n"
		"  -q, -v               quieter / more detail\n"
		"\n"
		"An endpoint's API key comes from LYNN_API_KEY or OPENAI_API_KEY (never printed).\n"
		"Exit: 0 NET_WIN, 1 ABORT, 2 usage or bad input, 3 runtime or network failure.\n");
}

static bool is_url(const char *s)
{
	return s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8));
}

/* A name fit for a file name: [A-Za-z0-9._-], others become '_'. */
static char *file_tag(const char *s)
{
	char *t = strdup(s && *s ? s : "model"), *p;
	if (!t)
		return NULL;
	for (p = t; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '_' || *p == '-'))
			*p = '_';
	return t;
}

static char *default_tag(const char *model, const char *adapter)
{
	const char *s = adapter ? adapter : model;
	char buf[PATH_MAX], *b;
	if (is_url(s) && !adapter) {
		const char *h = strstr(s, "://") + 3;
		snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(h, "/,"), h);
		return file_tag(buf);
	}
	snprintf(buf, sizeof(buf), "%s", s);
	while (strlen(buf) > 1 && buf[strlen(buf) - 1] == '/')
		buf[strlen(buf) - 1] = 0;
	b = basename(buf);
	return file_tag(b);
}

/* The prompts folder: ./prompts, else <dir of the binary>/prompts. */
static char *default_prompts_dir(void)
{
	char exe[PATH_MAX];
	ssize_t n;
	if (lynn_dir_exists("prompts"))
		return strdup("prompts");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *d = dirname(exe), *p = lynn_path_join(d, "prompts");
		if (p && lynn_dir_exists(p))
			return p;
		free(p);
	}
	return strdup("prompts");
}

static int mkdir_p(const char *path, struct lynn_err *err)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return lynn_errf(err, -LYNN_EIO, "eval: cannot create '%s': %s", buf, strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return lynn_errf(err, -LYNN_EIO, "eval: cannot create '%s': %s", buf, strerror(errno));
	return 0;
}

/* ===== model sources ===== */

struct source {
	struct lynn_eval_source s;
	struct lynn_client *client;
	struct lynn_engine *engine;
	struct lynn_eval_engine ee;
	char *identity;
};

static int gen_client(void *ud, const struct lynn_chat_req *reqs, size_t n, lynn_client_done_fn done,
		      void *done_ud, struct lynn_err *err)
{
	return lynn_client_run(ud, reqs, n, done, done_ud, err);
}

struct gen_opts {
	int concurrency, retries, threads;
	enum lynn_device device;
	double timeout_s, backoff_s;
	bool think;
};

/* Set up a model source. `model` is a URL (endpoint) or a path (in-process). */
static int source_open(struct source *src, const char *model, const char *adapter,
		       const struct gen_opts *go, struct lynn_err *err)
{
	memset(src, 0, sizeof(*src));
	src->s.think = go->think;
	if (is_url(model)) {
		struct lynn_client_opts o = { 0 };
		const char *key = getenv("LYNN_API_KEY");
		if (!key || !*key)
			key = getenv("OPENAI_API_KEY");
		o.urls = model;
		o.concurrency = go->concurrency;
		o.timeout_s = go->timeout_s;
		o.max_retries = go->retries;
		o.backoff_s = go->backoff_s;
		o.think = go->think;
		o.api_key = key;
		if (adapter && lynn_dir_exists(adapter))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "eval: adapter '%s' is a folder but the model is an endpoint; serve the "
					 "adapter and pass its served name", adapter);
		src->client = lynn_client_create(&o, err);
		if (!src->client)
			return err ? err->code : -LYNN_EINVAL;
		if (asprintf(&src->identity, "%s#%s", model, lynn_client_model(src->client)) < 0) {
			src->identity = NULL;
			return lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		}
		src->s.model = src->identity;
		src->s.adapter = adapter;
		src->s.req_model = adapter; /* a served LoRA is addressed by its name */
		src->s.gen = gen_client;
		src->s.gen_ud = src->client;
		return 0;
	}
	if (strstr(model, "://"))
		return lynn_errf(err, -LYNN_EINVAL, "eval: model '%s' is not an http(s) URL", model);
	if (!lynn_file_exists(model) && !lynn_dir_exists(model))
		return lynn_errf(err, -LYNN_ENOTFOUND, "eval: model '%s' not found", model);
	if (adapter && !lynn_dir_exists(adapter))
		return lynn_errf(err, -LYNN_ENOTFOUND, "eval: adapter folder '%s' not found", adapter);
	{
		/* in-process: the engine, with the adapter attached (switched per request) */
		struct lynn_engine_opts eo = { go->threads, adapter, go->device };
		double t0 = lynn_now();
		src->engine = lynn_engine_open(model, &eo, err);
		if (!src->engine)
			return err ? err->code : -LYNN_EFORMAT;
		lynn_log_info("eval: loaded '%s'%s%s in %.2f s", model, adapter ? " with adapter " : "",
			      adapter ? adapter : "", lynn_now() - t0);
	}
	src->ee.engine = src->engine;
	src->ee.batch = go->concurrency;
	src->ee.think = go->think;
	src->s.model = model;
	src->s.adapter = adapter;
	src->s.req_model = adapter ? "adapter" : NULL; /* set: adapter on */
	src->s.gen = lynn_eval_engine_gen;
	src->s.gen_ud = &src->ee;
	return 0;
}

static void source_close(struct source *src)
{
	lynn_client_free(src->client);
	lynn_engine_close(src->engine);
	free(src->identity);
}

/* ===== the four gates ===== */

struct opts {
	const char *models[MAX_MODELS];
	const char *labels[MAX_MODELS];
	int n_models, n_labels;
	const char *adapter, *base, *prompts, *prompts_dir, *output, *out_dir, *tag, *runner;
	const char *sanity_json, *suite;
	bool sanity_pass, resume, json;
	struct gen_opts go;
};

static int load_sets(const struct opts *o, const char *dir, struct lynn_eval_set *style,
		     struct lynn_eval_set *v8, struct lynn_eval_set *v9, bool want_style,
		     struct lynn_err *err)
{
	static const char *v8f[] = { "stage1_tool_calling.jsonl", "stage4_research.jsonl", "stage5_coding.jsonl" };
	static const char *v9f[] = { "v9_holdout.jsonl", "v9_probe_expanded.jsonl" };
	int rc = 0;
	if (want_style) {
		char *p = o->prompts ? strdup(o->prompts) : lynn_path_join(dir, "v4_distill_verify_35_v2.jsonl");
		if (p && !o->prompts && !lynn_file_exists(p)) {
			free(p);
			p = lynn_path_join(dir, "v4_distill_verify_35.jsonl");
		}
		rc = p ? lynn_eval_set_load(style, p, err) : lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		free(p);
		if (rc)
			return rc;
	}
	for (size_t i = 0; v8 && i < LYNN_ARRAY_LEN(v8f) && !rc; i++) {
		char *p = lynn_path_join(dir, v8f[i]);
		rc = lynn_eval_set_load(v8, p, err);
		free(p);
	}
	for (size_t i = 0; v9 && i < LYNN_ARRAY_LEN(v9f) && !rc; i++) {
		char *p = lynn_path_join(dir, v9f[i]);
		rc = lynn_eval_set_load(v9, p, err);
		free(p);
	}
	return rc;
}

static char *with_suffix(const char *path, const char *suffix)
{
	size_t n = strlen(path);
	char *s;
	if (n > 5 && !strcmp(path + n - 5, ".json"))
		n -= 5;
	if (asprintf(&s, "%.*s%s", (int)n, path, suffix) < 0)
		return NULL;
	return s;
}

/* Where a run's files go: with --output its folder is made; else the
 * --out-dir (*od, default "reports") is. `ts` gets the local time stamp
 * (YYYYmmddTHHMMSS) that names the files of a run. */
static int prepare_out(const struct opts *o, const char **od, char ts[32], struct lynn_err *err)
{
	time_t now = time(NULL);
	struct tm tmv;

	localtime_r(&now, &tmv);
	strftime(ts, 32, "%Y%m%dT%H%M%S", &tmv);
	*od = o->out_dir ? o->out_dir : "reports";
	if (o->output) {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s", o->output);
		return mkdir_p(dirname(tmp), err);
	}
	return mkdir_p(*od, err);
}

static int write_text(const char *path, const char *text, struct lynn_err *err)
{
	return lynn_write_atomic(path, text, strlen(text), err);
}

static int run_gates(struct opts *o)
{
	struct lynn_err err = { 0 };
	struct lynn_eval_set style = { LYNN_EVAL_STYLE, NULL, 0 }, v8 = { LYNN_EVAL_V8, NULL, 0 },
			     v9 = { LYNN_EVAL_V9, NULL, 0 };
	struct lynn_eval_output *out[6] = { 0 }; /* style/v8/v9 × cand/base */
	struct source cand = { 0 }, base = { 0 };
	struct lynn_cache *cache = NULL;
	char *dir = NULL, *tag = NULL, *report_path = NULL, *md_path = NULL, *cache_path = NULL,
	     *canon = NULL, *json = NULL, *md = NULL;
	cJSON *sanity = NULL, *rep = NULL;
	bool net_win = false, bar = cmd_progress_enabled();
	const char *model = o->models[0], *base_model, *od;
	char ts[32];
	int rc = 0, status = 3;
	double t0;

	if (!o->base && !o->adapter)
		return cmd_usage_error("eval", "no baseline: give --base, or --adapter (the baseline is then --model without it)");
	base_model = o->base ? o->base : model;
	dir = o->prompts_dir ? strdup(o->prompts_dir) : default_prompts_dir();
	tag = o->tag ? file_tag(o->tag) : default_tag(model, o->adapter);
	if (!dir || !tag) {
		rc = lynn_errf(&err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	if ((rc = load_sets(o, dir, &style, &v8, &v9, true, &err)))
		goto out;
	if (!style.n || !v8.n || !v9.n) {
		rc = lynn_errf(&err, -LYNN_EFORMAT, "eval: empty prompt set (style %zu, v8 %zu, v9 %zu records) in '%s'",
			       style.n, v8.n, v9.n, dir);
		goto out;
	}
	{
		size_t n_ref = 0;
		for (size_t i = 0; i < style.n; i++)
			n_ref += style.items[i].reference != NULL;
		lynn_log_info("eval: prompts style=%zu (%zu with references) v8=%zu v9=%zu from '%s'",
			      style.n, n_ref, v8.n, v9.n, dir);
	}
	/* where things go */
	if ((rc = prepare_out(o, &od, ts, &err)))
		goto out;
	if (o->output) {
		report_path = strdup(o->output);
		md_path = with_suffix(o->output, ".md");
		cache_path = with_suffix(o->output, ".cache.jsonl.zst");
	} else {
		char *name = NULL;
		if (asprintf(&name, "4gate_%s_%s.json", tag, ts) >= 0) {
			report_path = lynn_path_join(od, name);
			free(name);
		}
		if (report_path)
			md_path = with_suffix(report_path, ".md");
		canon = lynn_path_join(od, "4gate_results.json");
		if (asprintf(&name, "4gate_%s.cache.jsonl.zst", tag) >= 0) {
			cache_path = lynn_path_join(od, name);
			free(name);
		}
	}
	if (!report_path || !md_path || !cache_path || (!o->output && !canon)) {
		rc = lynn_errf(&err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	sanity = lynn_eval_sanity(o->sanity_json, o->sanity_pass);
	lynn_log_info("eval: sanity pass=%s source=%s",
		      cJSON_IsTrue(cJSON_GetObjectItem(sanity, "pass")) ? "true" : "false",
		      cJSON_GetStringValue(cJSON_GetObjectItem(sanity, "source")));
	if ((rc = source_open(&cand, model, o->adapter, &o->go, &err)))
		goto out;
	if (!strcmp(base_model, model)) {
		/* the same endpoint (its default model) or the same folder (adapter
		 * off): one client or engine, one request queue for both sides */
		base.s = cand.s;
		base.s.adapter = NULL;
		base.s.req_model = NULL;
	} else if ((rc = source_open(&base, base_model, NULL, &o->go, &err))) {
		goto out;
	}
	cache = lynn_cache_open(cache_path, o->resume, &err);
	if (!cache) {
		rc = err.code;
		goto out;
	}
	if (o->resume)
		lynn_log_info("eval: resume: %zu cached outputs in '%s'", lynn_cache_n_loaded(cache), cache_path);
	for (int k = 0; k < 6; k++) {
		size_t n = (k % 3 == 0 ? style.n : k % 3 == 1 ? v8.n : v9.n);
		out[k] = calloc(n, sizeof(**out));
		if (!out[k]) {
			rc = lynn_errf(&err, -LYNN_ENOMEM, "eval: out of memory");
			goto out;
		}
	}
	t0 = lynn_now();
	{
		static const char *labels[6] = { "g1 style (candidate)", "g2 v8 (candidate)", "g2 v9 (candidate)",
						 "g3 style (baseline)", "g2 v8 (baseline)", "g2 v9 (baseline)" };
		const struct lynn_eval_set *sets[3] = { &style, &v8, &v9 };
		struct lynn_eval_job jobs[6];
		for (int j = 0; j < 6; j++) {
			jobs[j] = (struct lynn_eval_job){ j < 3 ? &cand.s : &base.s, sets[j % 3], out[j], labels[j], 0, 0 };
		}
		if ((rc = lynn_eval_generate(jobs, 6, cache, bar, &err)))
			goto out;
	}
	{
		struct lynn_eval_inputs in = { 0 };
		in.runner = o->runner ? o->runner : (is_url(model) ? "remote" : "local");
		in.model_tag = o->tag ? o->tag : tag;
		in.base = base_model;
		in.adapter = o->adapter;
		in.style = &style;
		in.v8 = &v8;
		in.v9 = &v9;
		in.style_cand = out[0];
		in.v8_cand = out[1];
		in.v9_cand = out[2];
		in.style_base = out[3];
		in.v8_base = out[4];
		in.v9_base = out[5];
		in.sanity = sanity;
		in.runtime_s = lynn_now() - t0;
		rep = lynn_eval_report(&in, &net_win, &err);
		if (!rep) {
			rc = err.code;
			goto out;
		}
	}
	json = lynn_json_print_pretty(rep);
	md = lynn_eval_markdown(rep);
	if (!json || !md) {
		rc = lynn_errf(&err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	if ((rc = lynn_json_write(report_path, rep, &err)) || (canon && (rc = lynn_json_write(canon, rep, &err))) ||
	    (rc = write_text(md_path, md, &err)))
		goto out;
	{
		const cJSON *hf = cJSON_GetObjectItem(rep, "hard_fail_reasons"), *x;
		printf("verdict: %s\n", net_win ? "NET_WIN" : "ABORT");
		printf("net_score: %+.2f\n", cJSON_GetNumberValue(cJSON_GetObjectItem(rep, "net_score")));
		if (cJSON_GetArraySize(hf)) {
			printf("hard_fail_reasons:\n");
			cJSON_ArrayForEach(x, hf) printf("  - %s\n", x->valuestring);
		}
		printf("report: %s\n", report_path);
		if (canon)
			printf("canonical: %s\n", canon);
		printf("summary: %s\n", md_path);
		printf("\n__FOUR_GATE_%s__\n", net_win ? "PASS" : "FAIL");
		fflush(stdout);
	}
	status = net_win ? 0 : 1;
out:
	if (rc)
		status = cmd_fail(&err);
	lynn_cache_close(cache);
	source_close(&cand);
	source_close(&base);
	for (int k = 0; k < 6; k++) {
		lynn_eval_outputs_release(out[k], k % 3 == 0 ? style.n : k % 3 == 1 ? v8.n : v9.n);
		free(out[k]);
	}
	lynn_eval_set_release(&style);
	lynn_eval_set_release(&v8);
	lynn_eval_set_release(&v9);
	cJSON_Delete(sanity);
	cJSON_Delete(rep);
	free(json);
	free(md);
	free(dir);
	free(tag);
	free(report_path);
	free(md_path);
	free(cache_path);
	free(canon);
	return status;
}

/* ===== daily-mix ===== */

static int run_suite(struct opts *o)
{
	struct lynn_err err = { 0 };
	struct lynn_eval_set v8 = { LYNN_EVAL_V8, NULL, 0 }, v9 = { LYNN_EVAL_V9, NULL, 0 };
	bool want8 = false, want9 = false, bar = cmd_progress_enabled();
	struct lynn_cache *cache = NULL;
	char *dir = NULL, *path = NULL, *md = NULL, *cache_path = NULL, ts[32];
	const char *od;
	cJSON *rep = NULL, *models;
	int rc = 0, status = 3;

	{
		char buf[256], *save = NULL, *t;
		snprintf(buf, sizeof(buf), "%s", o->suite);
		for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			if (!strcmp(t, "v8"))
				want8 = true;
			else if (!strcmp(t, "v9"))
				want9 = true;
			else
				return cmd_usage_error("eval", "--suite: unknown suite '%s' (v8, v9)", t);
		}
	}
	if (o->n_labels && o->n_labels != o->n_models)
		return cmd_usage_error("eval", "--label given %d times for %d --model", o->n_labels, o->n_models);
	dir = o->prompts_dir ? strdup(o->prompts_dir) : default_prompts_dir();
	if ((rc = load_sets(o, dir, NULL, want8 ? &v8 : NULL, want9 ? &v9 : NULL, false, &err)))
		goto out;
	{
		char *name = NULL;
		if ((rc = prepare_out(o, &od, ts, &err)))
			goto out;
		if (o->output) {
			path = strdup(o->output);
			cache_path = with_suffix(o->output, ".cache.jsonl.zst");
		} else {
			if (asprintf(&name, "daily_mix_%s.json", ts) >= 0) {
				path = lynn_path_join(od, name);
				free(name);
			}
			cache_path = lynn_path_join(od, "daily_mix.cache.jsonl.zst");
		}
	}
	cache = lynn_cache_open(cache_path, o->resume, &err);
	if (!cache) {
		rc = err.code;
		goto out;
	}
	rep = lynn_json_report_new(LYNN_DAILY_SCHEMA);
	cJSON_AddBoolToObject(rep, "think", o->go.think);
	models = cJSON_AddArrayToObject(rep, "models");
	for (int m = 0; m < o->n_models; m++) {
		struct source src = { 0 };
		struct lynn_eval_output *o8 = calloc(v8.n + 1, sizeof(*o8)), *o9 = calloc(v9.n + 1, sizeof(*o9));
		const char *label = o->n_labels ? o->labels[m] : o->models[m];
		char l8[300], l9[300];
		cJSON *mj = NULL;
		snprintf(l8, sizeof(l8), "v8 (%s)", label);
		snprintf(l9, sizeof(l9), "v9 (%s)", label);
		rc = !o8 || !o9 ? lynn_errf(&err, -LYNN_ENOMEM, "eval: out of memory")
				: source_open(&src, o->models[m], NULL, &o->go, &err);
		if (!rc) {
			struct lynn_eval_job jobs[2];
			size_t nj = 0;
			if (want8)
				jobs[nj++] = (struct lynn_eval_job){ &src.s, &v8, o8, l8, 0, 0 };
			if (want9)
				jobs[nj++] = (struct lynn_eval_job){ &src.s, &v9, o9, l9, 0, 0 };
			rc = lynn_eval_generate(jobs, nj, cache, bar, &err);
		}
		if (!rc) {
			mj = lynn_eval_daily_model(label, o->models[m], want8 ? &v8 : NULL, o8, want9 ? &v9 : NULL, o9, &err);
			if (!mj)
				rc = err.code;
			else
				cJSON_AddItemToArray(models, mj);
		}
		source_close(&src);
		lynn_eval_outputs_release(o8, v8.n);
		lynn_eval_outputs_release(o9, v9.n);
		free(o8);
		free(o9);
		if (rc)
			goto out;
	}
	if ((rc = lynn_json_write(path, rep, &err)))
		goto out;
	md = lynn_eval_daily_markdown(rep);
	if (o->json) {
		char *s = lynn_json_print_pretty(rep);
		fputs(s ? s : "", stdout);
		free(s);
	} else {
		fputs(md ? md : "", stdout);
		printf("\nreport: %s\n", path);
	}
	status = 0;
out:
	if (rc)
		status = cmd_fail(&err);
	lynn_cache_close(cache);
	lynn_eval_set_release(&v8);
	lynn_eval_set_release(&v9);
	cJSON_Delete(rep);
	free(md);
	free(dir);
	free(path);
	free(cache_path);
	return status;
}

/* ===== options ===== */

int cmd_eval(int argc, char **argv)
{
	enum { O_ADAPTER = 256, O_BASE, O_PROMPTS, O_PROMPTS_DIR, O_OUTPUT, O_OUT_DIR, O_TAG, O_RUNNER,
	       O_SANITY_JSON, O_SANITY_PASS, O_CONC, O_RESUME, O_SUITE, O_LABEL, O_THINK, O_TIMEOUT,
	       O_RETRIES, O_BACKOFF, O_JSON, O_THREADS, O_DEVICE };
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "adapter", required_argument, NULL, O_ADAPTER },
		{ "base", required_argument, NULL, O_BASE },
		{ "prompts", required_argument, NULL, O_PROMPTS },
		{ "prompts-dir", required_argument, NULL, O_PROMPTS_DIR },
		{ "output", required_argument, NULL, O_OUTPUT },
		{ "out-dir", required_argument, NULL, O_OUT_DIR },
		{ "model-tag", required_argument, NULL, O_TAG },
		{ "runner", required_argument, NULL, O_RUNNER },
		{ "sanity-json", required_argument, NULL, O_SANITY_JSON },
		{ "sanity-pass", no_argument, NULL, O_SANITY_PASS },
		{ "concurrency", required_argument, NULL, O_CONC },
		{ "resume", no_argument, NULL, O_RESUME },
		{ "suite", required_argument, NULL, O_SUITE },
		{ "label", required_argument, NULL, O_LABEL },
		{ "think", no_argument, NULL, O_THINK },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "retries", required_argument, NULL, O_RETRIES },
		{ "backoff", required_argument, NULL, O_BACKOFF },
		{ "json", no_argument, NULL, O_JSON },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "device", required_argument, NULL, O_DEVICE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	double v;
	int c;

	o.go.concurrency = 8;
	o.go.retries = 5;
	o.go.timeout_s = 600;
	o.go.backoff_s = 1;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+m:hqv", lo, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'm':
			if (o.n_models == MAX_MODELS)
				return cmd_usage_error("eval", "at most %d --model", MAX_MODELS);
			o.models[o.n_models++] = optarg;
			break;
		case O_LABEL:
			if (o.n_labels == MAX_MODELS)
				return cmd_usage_error("eval", "at most %d --label", MAX_MODELS);
			o.labels[o.n_labels++] = optarg;
			break;
		case O_ADAPTER: o.adapter = optarg; break;
		case O_BASE: o.base = optarg; break;
		case O_PROMPTS: o.prompts = optarg; break;
		case O_PROMPTS_DIR: o.prompts_dir = optarg; break;
		case O_OUTPUT: o.output = optarg; break;
		case O_OUT_DIR: o.out_dir = optarg; break;
		case O_TAG: o.tag = optarg; break;
		case O_RUNNER: o.runner = optarg; break;
		case O_SANITY_JSON: o.sanity_json = optarg; break;
		case O_SANITY_PASS: o.sanity_pass = true; break;
		case O_RESUME: o.resume = true; break;
		case O_SUITE: o.suite = optarg; break;
		case O_THINK: o.go.think = true; break;
		case O_JSON: o.json = true; break;
		case O_CONC:
			if (cmd_opt_double("eval", "--concurrency", optarg, 1, 4096, &v))
				return 2;
			o.go.concurrency = (int)v;
			break;
		case O_RETRIES:
			if (cmd_opt_double("eval", "--retries", optarg, 0, 100, &v))
				return 2;
			o.go.retries = (int)v;
			break;
		case O_TIMEOUT:
			if (cmd_opt_double("eval", "--timeout", optarg, 0.001, 86400, &v))
				return 2;
			o.go.timeout_s = v;
			break;
		case O_BACKOFF:
			if (cmd_opt_double("eval", "--backoff", optarg, 0, 60, &v))
				return 2;
			o.go.backoff_s = v;
			break;
		case O_THREADS:
			if (cmd_opt_double("eval", "--threads", optarg, 0, 4096, &v))
				return 2;
			o.go.threads = (int)v;
			break;
		case O_DEVICE:
			if (cmd_opt_device("eval", optarg, &o.go.device))
				return 2;
			break;
		case '?':
		default:
			if (optopt && optopt < 256)
				return cmd_usage_error("eval", "unknown or incomplete option '-%c'", optopt);
			return cmd_usage_error("eval", "unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cmd_usage_error("eval", "unexpected argument '%s'", argv[optind]);
	if (!o.n_models)
		return cmd_usage_error("eval", "--model is required");
	if (o.suite)
		return run_suite(&o);
	if (o.n_models > 1)
		return cmd_usage_error("eval", "several --model are for --suite; the gates take one");
	if (o.output && o.out_dir)
		return cmd_usage_error("eval", "--output and --out-dir exclude each other");
	return run_gates(&o);
}
