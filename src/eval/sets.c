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
		if (v == (double)(long long)v && v > -1e15 && v < 1e15)
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
	const struct lynn_eval_source *src;
	const struct lynn_eval_set *set;
	struct lynn_cache *cache;
	struct lynn_eval_output *outputs;
	size_t *map;      /* request index -> item index */
	char (*keys)[65];
	size_t done, total;
	struct lynn_progress_bar bar;
	double t0, t_log;
	const char *label;
};

static int on_done(void *ud, size_t ri, const struct lynn_chat_out *o, struct lynn_err *err)
{
	struct gen_ctx *g = ud;
	size_t i = g->map[ri];
	struct lynn_eval_output *out = &g->outputs[i];
	const struct lynn_eval_item *it = &g->set->items[i];
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
	cJSON_AddStringToObject(rec, "key", g->keys[i]);
	cJSON_AddStringToObject(rec, "model", g->src->model);
	if (g->src->adapter)
		cJSON_AddStringToObject(rec, "adapter", g->src->adapter);
	else
		cJSON_AddNullToObject(rec, "adapter");
	if (it->id)
		cJSON_AddStringToObject(rec, "id", it->id);
	cJSON_AddNumberToObject(rec, "max_tokens", it->max_tokens);
	cJSON_AddBoolToObject(rec, "think", g->src->think);
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
	if (g->bar.enabled) {
		lynn_progress_bar_update(&g->bar, g->done, g->total);
	} else {
		double now = lynn_now();
		if (g->done == g->total || now - g->t_log >= 5.0) {
			g->t_log = now;
			lynn_log_info("%s: %zu/%zu (%.2f/s)", g->label, g->done, g->total,
				      (double)g->done / LYNN_MAX(now - g->t0, 1e-9));
		}
	}
	return 0;
}

int lynn_eval_generate(const struct lynn_eval_source *src, const struct lynn_eval_set *set,
		       struct lynn_cache *cache, const char *label, bool progress_bar,
		       struct lynn_eval_output *outputs, size_t *n_gen, size_t *n_cached,
		       struct lynn_err *err)
{
	struct gen_ctx g = { 0 };
	struct lynn_chat_req *reqs = NULL;
	size_t n_req = 0, hits = 0;
	int rc = 0;

	g.src = src;
	g.set = set;
	g.cache = cache;
	g.outputs = outputs;
	g.label = label;
	g.keys = calloc(set->n ? set->n : 1, sizeof(*g.keys));
	g.map = calloc(set->n ? set->n : 1, sizeof(*g.map));
	reqs = calloc(set->n ? set->n : 1, sizeof(*reqs));
	if (!g.keys || !g.map || !reqs) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		goto out;
	}
	for (size_t i = 0; i < set->n; i++) {
		const struct lynn_eval_item *it = &set->items[i];
		const cJSON *rec, *x;
		lynn_cache_key(g.keys[i], src->model, src->adapter, it->prompt, it->tools, it->max_tokens,
			       src->think);
		rec = cache ? lynn_cache_get(cache, g.keys[i]) : NULL;
		x = cJSON_GetObjectItemCaseSensitive(rec, "output");
		if (cJSON_IsString(x)) {
			const cJSON *r = cJSON_GetObjectItemCaseSensitive(rec, "reasoning");
			const cJSON *l = cJSON_GetObjectItemCaseSensitive(rec, "latency_s");
			outputs[i].text = strdup(x->valuestring);
			outputs[i].reasoning = strdup(cJSON_IsString(r) ? r->valuestring : "");
			outputs[i].latency_s = cJSON_IsNumber(l) ? l->valuedouble : 0;
			outputs[i].cached = true;
			if (!outputs[i].text || !outputs[i].reasoning) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
				goto out;
			}
			hits++;
			continue;
		}
		reqs[n_req].prompt = it->prompt;
		reqs[n_req].tools = it->tools;
		reqs[n_req].max_tokens = it->max_tokens;
		reqs[n_req].model = src->req_model;
		g.map[n_req++] = i;
	}
	g.total = n_req;
	if (hits)
		lynn_log_info("%s: %zu of %zu outputs from the cache", label, hits, set->n);
	if (n_req) {
		if (!src->gen) {
			rc = lynn_errf(err, -LYNN_EUNSUPPORTED, "eval: %s: no generator for this model source", label);
			goto out;
		}
		lynn_progress_bar_init(&g.bar, label, false, stderr, progress_bar);
		g.t0 = g.t_log = lynn_now();
		rc = src->gen(src->gen_ud, reqs, n_req, on_done, &g, err);
		if (g.bar.enabled)
			lynn_progress_bar_finish(&g.bar);
	}
out:
	if (n_gen)
		*n_gen = g.done;
	if (n_cached)
		*n_cached = hits;
	free(reqs);
	free(g.keys);
	free(g.map);
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
