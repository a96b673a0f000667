/*
 * sets.c - the eval prompt sets (JSONL records of SPEC §5) and the
 * generation step that fills outputs through the output cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/util.h"

#define SET_MAX_FILE (256u << 20)

/* ===== loading ===== */

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Python str() of a JSON scalar, for gold answers written as numbers. */
static char *scalar_text(const cJSON *x)
{
	char buf[64];
	if (cJSON_IsString(x))
		return strdup(x->valuestring);
	if (cJSON_IsBool(x))
		return strdup(cJSON_IsTrue(x) ? "True" : "False");
	if (cJSON_IsNumber(x)) {
		double v = x->valuedouble;
		if (v > -1e15 && v < 1e15 && v == (double)(long long)v) /* range first: no UB */
			snprintf(buf, sizeof(buf), "%lld", (long long)v);
		else
			lynn_eval_pyfloat(v, buf, sizeof(buf));
		return strdup(buf);
	}
	return NULL;
}

static const char *opt_str(const cJSON *o, const char *k)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool contains(const char *s, const char *needle)
{
	return s && strstr(s, needle);
}

static int parse_item(struct lynn_eval_set *set, const cJSON *o, struct lynn_eval_item *it,
		      const char *path, size_t line, struct lynn_err *err)
{
	const cJSON *x;
	const char *p;

	x = cJSON_GetObjectItemCaseSensitive(o, "id");
	if (x && !cJSON_IsNull(x)) {
		if (!(it->id = scalar_text(x)))
			return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'id' is not a string", path, line);
	}
	p = opt_str(o, "category");
	it->category = strdup(p ? p : "");
	/* the first present (non-empty) of prompt, user, problem */
	p = opt_str(o, "prompt");
	if (!p || !*p)
		p = opt_str(o, "user");
	if (!p || !*p)
		p = opt_str(o, "problem");
	it->prompt = strdup(p ? p : "");
	if (!it->category || !it->prompt)
		return lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
	if (!p || !*p)
		return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: no 'prompt', 'user' or 'problem' text", path, line);
	switch (set->kind) {
	case LYNN_EVAL_STYLE:
		p = opt_str(o, "reference_output");
		x = cJSON_GetObjectItemCaseSensitive(o, "reference_output");
		if (x && !cJSON_IsNull(x) && !cJSON_IsString(x))
			return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'reference_output' is not a string", path, line);
		it->reference = dup_or_null(p && *p ? p : NULL);
		it->max_tokens = contains(it->category, "long") || contains(it->category, "research") ? 1024 : 384;
		break;
	case LYNN_EVAL_V8: {
		const cJSON *exp = cJSON_GetObjectItemCaseSensitive(o, "expected");
		x = cJSON_GetObjectItemCaseSensitive(o, "tools");
		if (x && !cJSON_IsNull(x)) {
			if (!cJSON_IsArray(x))
				return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'tools' is not an array", path, line);
			it->tools = cJSON_Duplicate(x, 1);
		}
		if (exp && !cJSON_IsObject(exp))
			return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'expected' is not an object", path, line);
		x = cJSON_GetObjectItemCaseSensitive(exp, "tool_name");
		if (x && !cJSON_IsString(x))
			return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'expected.tool_name' is not a string", path, line);
		it->tool_name = strdup(x ? x->valuestring : "");
		x = cJSON_GetObjectItemCaseSensitive(exp, "param_hints");
		if (x && !cJSON_IsNull(x)) {
			const cJSON *kv, *h;
			if (!cJSON_IsObject(x))
				return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'expected.param_hints' is not an object", path, line);
			cJSON_ArrayForEach(kv, x) {
				if (!cJSON_IsArray(kv))
					return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'expected.param_hints.%s' is not a list", path, line, kv->string);
				cJSON_ArrayForEach(h, kv) if (!cJSON_IsString(h))
					return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'expected.param_hints.%s' holds a non-string", path, line, kv->string);
			}
			it->param_hints = cJSON_Duplicate(x, 1);
		}
		it->max_tokens = 256;
		break;
	}
	case LYNN_EVAL_V9:
		x = cJSON_GetObjectItemCaseSensitive(o, "gold_answer");
		if (x && !cJSON_IsNull(x)) {
			if (!(it->gold = scalar_text(x)))
				return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'gold_answer' is not a string or number", path, line);
		}
		x = cJSON_GetObjectItemCaseSensitive(o, "verifier");
		if (x && !cJSON_IsString(x))
			return lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: field 'verifier' is not a string", path, line);
		it->verifier = strdup(x ? x->valuestring : "string_match");
		x = cJSON_GetObjectItemCaseSensitive(o, "answer");
		it->answer = x && !cJSON_IsNull(x) ? scalar_text(x) : NULL;
		it->max_tokens = 512;
		break;
	}
	return 0;
}

static void item_release(struct lynn_eval_item *it)
{
	free(it->id);
	free(it->category);
	free(it->prompt);
	free(it->reference);
	cJSON_Delete(it->tools);
	free(it->tool_name);
	cJSON_Delete(it->param_hints);
	free(it->gold);
	free(it->verifier);
	free(it->answer);
	memset(it, 0, sizeof(*it));
}

int lynn_eval_set_load(struct lynn_eval_set *set, const char *path, struct lynn_err *err)
{
	char *data = NULL, *p, *nl;
	size_t len = 0, line = 0, cap = set->n;
	int rc;

	if (!lynn_file_exists(path))
		return lynn_errf(err, -LYNN_ENOTFOUND, "eval: prompt file '%s' not found", path);
	rc = lynn_file_read(path, SET_MAX_FILE, &data, &len, err);
	if (rc)
		return rc;
	for (p = data; p < data + len; p = nl + 1) {
		struct lynn_eval_item it = { 0 };
		cJSON *o;
		char what[300];
		nl = memchr(p, '\n', (size_t)(data + len - p));
		if (!nl)
			nl = data + len;
		line++;
		if ((size_t)(nl - p) == strspn(p, " \t\r\f\v") || p + strspn(p, " \t\r\f\v") >= nl)
			continue;
		snprintf(what, sizeof(what), "eval: '%s' line %zu", path, line);
		o = lynn_json_parse(what, p, (size_t)(nl - p), err);
		if (!o) {
			rc = err ? err->code : -LYNN_EFORMAT;
			if (err)
				err->code = -LYNN_EFORMAT;
			rc = -LYNN_EFORMAT;
			goto out;
		}
		if (!cJSON_IsObject(o)) {
			cJSON_Delete(o);
			rc = lynn_errf(err, -LYNN_EFORMAT, "eval: '%s' line %zu: not a JSON object", path, line);
			goto out;
		}
		rc = parse_item(set, o, &it, path, line, err);
		cJSON_Delete(o);
		if (rc) {
			item_release(&it);
			goto out;
		}
		if (set->n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct lynn_eval_item *ni = realloc(set->items, ncap * sizeof(*ni));
			if (!ni) {
				item_release(&it);
				rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
				goto out;
			}
			set->items = ni;
			cap = ncap;
		}
		set->items[set->n++] = it;
	}
out:
	free(data);
	return rc;
}

void lynn_eval_set_release(struct lynn_eval_set *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++)
		item_release(&set->items[i]);
	free(set->items);
	set->items = NULL;
	set->n = 0;
}

/* ===== Python str.strip() ===== */

static bool py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decode one well-formed UTF-8 sequence at s (n bytes left); 0 when not. */
static int utf8_at(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (n >= 1 && s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (n >= 2 && (s[0] & 0xe0) == 0xc0 && (s[1] & 0xc0) == 0x80) {
		*cp = ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
		return *cp >= 0x80 ? 2 : 0;
	}
	if (n >= 3 && (s[0] & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
		*cp = ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
		return *cp >= 0x800 ? 3 : 0;
	}
	return 0; /* 4-byte sequences are never whitespace */
}

void lynn_eval_strip(char *s)
{
	size_t n = strlen(s), a = 0, b = n;
	uint32_t cp;
	int k;

	while (a < n && (k = utf8_at((unsigned char *)s + a, n - a, &cp)) && py_space(cp))
		a += (size_t)k;
	while (b > a) {
		size_t st = b - 1;
		while (st > a && ((unsigned char)s[st] & 0xc0) == 0x80 && b - st < 3)
			st--;
		k = utf8_at((unsigned char *)s + st, b - st, &cp);
		if (!k || st + (size_t)k != b || !py_space(cp))
			break;
		b = st;
	}
	memmove(s, s + a, b - a);
	s[b - a] = 0;
}

/* ===== generation through the cache ===== */

struct gen_ctx {
	struct lynn_eval_job *jobs;
	struct lynn_cache *cache;
	size_t *map_job, *map_item; /* request index -> job, item */
	char (**keys)[65];          /* per job, per item */
	size_t done, total;
	size_t *job_left;           /* requests still out per job */
	struct lynn_progress_bar bar;
	double t0, t_log;
};

static int on_done(void *ud, size_t ri, const struct lynn_chat_out *o, struct lynn_err *err)
{
	struct gen_ctx *g = ud;
	struct lynn_eval_job *jb = &g->jobs[g->map_job[ri]];
	size_t i = g->map_item[ri];
	struct lynn_eval_output *out = &jb->outputs[i];
	const struct lynn_eval_item *it = &jb->set->items[i];
	cJSON *rec;
	int rc;

	out->text = strdup(o->text ? o->text : "");
	out->reasoning = strdup(o->reasoning ? o->reasoning : "");
	if (!out->text || !out->reasoning)
		return lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
	lynn_eval_strip(out->text);
	lynn_eval_strip(out->reasoning);
	out->latency_s = o->latency_s;
	rec = cJSON_CreateObject();
	cJSON_AddStringToObject(rec, "key", g->keys[g->map_job[ri]][i]);
	cJSON_AddStringToObject(rec, "model", jb->src->model);
	if (jb->src->adapter)
		cJSON_AddStringToObject(rec, "adapter", jb->src->adapter);
	else
		cJSON_AddNullToObject(rec, "adapter");
	if (it->id)
		cJSON_AddStringToObject(rec, "id", it->id);
	cJSON_AddNumberToObject(rec, "max_tokens", it->max_tokens);
	cJSON_AddBoolToObject(rec, "think", jb->src->think);
	cJSON_AddStringToObject(rec, "output", out->text);
	cJSON_AddStringToObject(rec, "reasoning", out->reasoning);
	cJSON_AddStringToObject(rec, "finish_reason", o->finish_reason ? o->finish_reason : "");
	cJSON_AddNumberToObject(rec, "latency_s", o->latency_s);
	cJSON_AddNumberToObject(rec, "attempts", o->attempts);
	rc = g->cache ? lynn_cache_put(g->cache, rec, err) : 0;
	cJSON_Delete(rec);
	if (rc)
		return rc;
	g->done++;
	jb->n_gen++;
	if (--g->job_left[g->map_job[ri]] == 0)
		lynn_log_debug("%s: done", jb->label);
	if (g->bar.enabled) {
		lynn_progress_bar_update(&g->bar, g->done, g->total);
	} else {
		double now = lynn_now();
		if (g->done == g->total || now - g->t_log >= 5.0) {
			struct lynn_buf b = LYNN_BUF_INIT;
			g->t_log = now;
			for (size_t k = 0; g->jobs[k].set; k++) {
				if (!g->jobs[k].set->n)
					continue;
				lynn_buf_printf(&b, "%s%s %zu/%zu", b.len ? ", " : "", g->jobs[k].label,
						g->jobs[k].n_gen + g->jobs[k].n_cached, g->jobs[k].set->n);
			}
			lynn_log_info("generate: %zu/%zu (%.2f/s) [%s]", g->done, g->total,
				      (double)g->done / LYNN_MAX(now - g->t0, 1e-9), b.data ? b.data : "");
			lynn_buf_release(&b);
		}
	}
	return 0;
}

static int generate_group(struct lynn_eval_job *jobs, size_t n_jobs, const bool *in_group,
			  struct lynn_cache *cache, bool progress_bar, struct lynn_err *err)
{
	struct gen_ctx g = { 0 };
	struct lynn_chat_req *reqs = NULL;
	const struct lynn_eval_source *src0 = NULL;
	size_t n_all = 0, n_req = 0;
	int rc = 0;

	for (size_t k = 0; k < n_jobs; k++)
		n_all += in_group[k] ? jobs[k].set->n : 0;
	g.jobs = jobs;
	g.cache = cache;
	g.keys = calloc(n_jobs, sizeof(*g.keys));
	g.job_left = calloc(n_jobs, sizeof(*g.job_left));
	g.map_job = calloc(n_all + 1, sizeof(*g.map_job));
	g.map_item = calloc(n_all + 1, sizeof(*g.map_item));
	reqs = calloc(n_all + 1, sizeof(*reqs));
	if (!g.keys || !g.job_left || !g.map_job || !g.map_item || !reqs) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	for (size_t k = 0; k < n_jobs; k++) {
		struct lynn_eval_job *jb = &jobs[k];
		if (!in_group[k])
			continue;
		src0 = jb->src;
		g.keys[k] = calloc(jb->set->n + 1, sizeof(**g.keys));
		if (!g.keys[k]) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
			goto out;
		}
		for (size_t i = 0; i < jb->set->n; i++) {
			const struct lynn_eval_item *it = &jb->set->items[i];
			const cJSON *rec, *x;
			lynn_cache_key(g.keys[k][i], jb->src->model, jb->src->adapter, it->prompt, it->tools,
				       it->max_tokens, jb->src->think);
			rec = cache ? lynn_cache_get(cache, g.keys[k][i]) : NULL;
			x = cJSON_GetObjectItemCaseSensitive(rec, "output");
			if (cJSON_IsString(x)) {
				const cJSON *r = cJSON_GetObjectItemCaseSensitive(rec, "reasoning");
				const cJSON *l = cJSON_GetObjectItemCaseSensitive(rec, "latency_s");
				jb->outputs[i].text = strdup(x->valuestring);
				jb->outputs[i].reasoning = strdup(cJSON_IsString(r) ? r->valuestring : "");
				jb->outputs[i].latency_s = cJSON_IsNumber(l) ? l->valuedouble : 0;
				jb->outputs[i].cached = true;
				if (!jb->outputs[i].text || !jb->outputs[i].reasoning) {
					rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
					goto out;
				}
				jb->n_cached++;
				continue;
			}
			reqs[n_req].prompt = it->prompt;
			reqs[n_req].tools = it->tools;
			reqs[n_req].max_tokens = it->max_tokens;
			reqs[n_req].model = jb->src->req_model;
			g.map_job[n_req] = k;
			g.map_item[n_req++] = i;
			g.job_left[k]++;
		}
		if (jb->n_cached)
			lynn_log_info("%s: %zu of %zu outputs from the cache", jb->label, jb->n_cached, jb->set->n);
	}
	g.total = n_req;
	if (n_req) {
		if (!src0 || !src0->gen) {
			rc = lynn_errf(err, -LYNN_EUNSUPPORTED, "eval: no generator for model '%s'",
				       src0 ? src0->model : "?");
			goto out;
		}
		lynn_progress_bar_init(&g.bar, "generate", false, stderr, progress_bar);
		g.t0 = g.t_log = lynn_now();
		rc = src0->gen(src0->gen_ud, reqs, n_req, on_done, &g, err);
		if (g.bar.enabled)
			lynn_progress_bar_finish(&g.bar);
	}
out:
	if (g.keys)
		for (size_t k = 0; k < n_jobs; k++)
			free(g.keys[k]);
	free(g.keys);
	free(g.job_left);
	free(reqs);
	free(g.map_job);
	free(g.map_item);
	return rc;
}

int lynn_eval_generate(struct lynn_eval_job *jobs, size_t n_jobs, struct lynn_cache *cache,
		       bool progress_bar, struct lynn_err *err)
{
	bool *done = calloc(n_jobs + 1, sizeof(bool)), *grp = calloc(n_jobs + 1, sizeof(bool));
	struct lynn_eval_job *all = calloc(n_jobs + 1, sizeof(*all)); /* NULL-set terminated copy */
	int rc = 0;

	if (!done || !grp || !all) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	memcpy(all, jobs, n_jobs * sizeof(*all));
	for (size_t k = 0; k < n_jobs && !rc; k++) {
		if (done[k])
			continue;
		/* one queue for every job that shares this job's generator */
		for (size_t j = 0; j < n_jobs; j++) {
			grp[j] = !done[j] && all[j].src->gen == all[k].src->gen &&
				 all[j].src->gen_ud == all[k].src->gen_ud;
			done[j] |= grp[j];
		}
		rc = generate_group(all, n_jobs, grp, cache, progress_bar, err);
	}
	for (size_t k = 0; k < n_jobs; k++) {
		jobs[k].n_gen = all[k].n_gen;
		jobs[k].n_cached = all[k].n_cached;
	}
out:
	free(done);
	free(grp);
	free(all);
	return rc;
}

void lynn_eval_outputs_release(struct lynn_eval_output *outputs, size_t n)
{
	if (!outputs)
		return;
	for (size_t i = 0; i < n; i++) {
		free(outputs[i].text);
		free(outputs[i].reasoning);
	}
}
