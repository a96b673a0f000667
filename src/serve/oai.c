/* oai.c - the OpenAI side of `lynn serve`: request bodies checked field by
 * field (400 naming the field, OpenAI's error object), the chat prompt
 * rendered with the model's template and tokenized, and the response,
 * chunk and usage objects (docs/reference/serving-and-hubs.md §1). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lynn/json.h"
#include "lynn/utf8.h"
#include "lynn/version.h"
#include "serve_internal.h"

#define MAX_STOP 16

int srv_fail(struct srv_error *e, int status, const char *param, const char *fmt, ...)
{
	va_list ap;
	memset(e, 0, sizeof *e);
	e->status = status;
	e->param = param;
	switch (status) {
	case 400: e->type = "invalid_request_error"; break;
	case 401: e->type = "authentication_error"; break;
	case 404: e->type = "not_found_error"; break;
	case 413: e->type = "invalid_request_error"; break;
	case 501: e->type = "not_supported_error"; break;
	case 503: e->type = "unavailable_error"; break;
	default: e->type = "server_error"; break;
	}
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	va_end(ap);
	return -1;
}

char *srv_error_json(const struct srv_error *e)
{
	cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
	char *s;
	cJSON_AddStringToObject(o, "message", e->message);
	cJSON_AddStringToObject(o, "type", e->type);
	cJSON_AddNumberToObject(o, "code", e->status);
	if (e->param)
		cJSON_AddStringToObject(o, "param", e->param);
	else
		cJSON_AddNullToObject(o, "param");
	if (e->n_ctx) {
		cJSON_AddNumberToObject(o, "n_prompt_tokens", (double)e->n_prompt_tokens);
		cJSON_AddNumberToObject(o, "n_ctx", (double)e->n_ctx);
	}
	s = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return s;
}

void srv_req_free(struct srv_req *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	free(r->bias_ids);
	free(r->bias);
	free(r->tools_json);
	lynn_tok_ids_release(&r->prompt);
	lynn_buf_release(&r->pending);
	srv_lps_release(&r->pending_lp);
	lynn_gen_result_release(&r->res);
	lynn_gen_free(r->gen);
	pthread_cond_destroy(&r->cv);
	free(r);
}

static void random_id(char *out, size_t n, const char *prefix)
{
	unsigned char b[12];
	if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
		uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
		memcpy(b, &t, 8);
		memset(b + 8, 0, 4);
	}
	size_t k = (size_t)snprintf(out, n, "%s", prefix);
	for (size_t i = 0; i < sizeof b && k + 2 < n; i++, k += 2)
		snprintf(out + k, n - k, "%02x", b[i]);
}

/* ---- field checks: absent fields keep the default ---- */

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out,
		   struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return srv_fail(e, 400, key, "'%s' must be a number", key);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return srv_fail(e, 400, key, "'%s' must be in [%g, %g] (got %g)", key, lo, hi,
				v->valuedouble);
	*out = v->valuedouble;
	return 0;
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, int64_t *out,
		   struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	double d = NAN;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (get_num(o, key, -HUGE_VAL, HUGE_VAL, &d, e))
		return -1;
	if (d != floor(d))
		return srv_fail(e, 400, key, "'%s' must be an integer", key);
	if (d < lo || d > hi)
		return srv_fail(e, 400, key, "'%s' must be in [%.0f, %.0f] (got %.0f)", key, lo, hi, d);
	*out = (int64_t)d;
	return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v))
		return srv_fail(e, 400, key, "'%s' must be true or false", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

/* Fields lynn does not implement: refused where they would change the
 * answer. */
static int refuse_unsupported(const cJSON *b, struct srv_error *e)
{
	const cJSON *v;
	if ((v = cJSON_GetObjectItemCaseSensitive(b, "response_format")) && !cJSON_IsNull(v)) {
		const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
		if (!cJSON_IsString(t))
			return srv_fail(e, 400, "response_format", "'response_format' must be an object with a 'type'");
		if (strcmp(t->valuestring, "text"))
			return srv_fail(e, 400, "response_format",
					"response_format '%.40s' needs constrained decoding, which lynn serve does not do",
					t->valuestring);
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(b, "echo")) && cJSON_IsTrue(v))
		return srv_fail(e, 400, "echo", "'echo' is not supported by lynn serve");
	return 0;
}

static int parse_stop(const cJSON *b, struct srv_req *r, struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "stop"), *it;
	int n = 0;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (cJSON_IsString(v))
		n = 1;
	else if (cJSON_IsArray(v))
		n = cJSON_GetArraySize(v);
	else
		return srv_fail(e, 400, "stop", "'stop' must be a string or a list of strings");
	if (n > MAX_STOP)
		return srv_fail(e, 400, "stop", "'stop' has %d strings (at most %d)", n, MAX_STOP);
	if (n && !(r->stop = calloc((size_t)n, sizeof *r->stop)))
		return srv_fail(e, 500, NULL, "out of memory");
	for (int i = 0; i < n; i++) {
		it = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
		if (!cJSON_IsString(it) || !it->valuestring[0])
			return srv_fail(e, 400, "stop", "'stop' entries must be non-empty strings");
		if (!(r->stop[r->n_stop++] = strdup(it->valuestring)))
			return srv_fail(e, 500, NULL, "out of memory");
	}
	return 0;
}

/* logit_bias: {"token id": bias in [-100, 100], ...} (OpenAI's), each id
 * once. */
static int parse_logit_bias(struct srv *s, const cJSON *b, struct srv_req *r, struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "logit_bias"), *it;
	const int n_vocab = lynn_tok_n_vocab(s->tok);
	int n = 0, k = 0, rc = 0;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsObject(v))
		return srv_fail(e, 400, "logit_bias", "'logit_bias' must be an object of token ids and numbers");
	if ((n = cJSON_GetArraySize(v)) > n_vocab)
		return srv_fail(e, 400, "logit_bias", "'logit_bias' has more entries than the vocabulary");
	uint8_t *named = n ? calloc((size_t)n_vocab / 8 + 1, 1) : NULL; /* ids seen, a bit each */
	if (n && (!named || !(r->bias_ids = malloc((size_t)n * sizeof *r->bias_ids)) ||
		  !(r->bias = malloc((size_t)n * sizeof *r->bias)))) {
		free(named);
		return srv_fail(e, 500, NULL, "out of memory");
	}
	cJSON_ArrayForEach(it, v) {
		char *end;
		errno = 0;
		long id = strtol(it->string, &end, 10);
		if (!it->string[0] || *end || errno || id < 0 || id >= n_vocab) {
			rc = srv_fail(e, 400, "logit_bias", "logit_bias key '%.40s' is not a token id in [0, %d)",
				      it->string, n_vocab);
			break;
		}
		if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100)) {
			rc = srv_fail(e, 400, "logit_bias", "logit_bias of token %ld must be a number in [-100, 100]",
				      id);
			break;
		}
		if (named[id / 8] & (1u << (id % 8))) {
			rc = srv_fail(e, 400, "logit_bias", "logit_bias names token %ld twice", id);
			break;
		}
		named[id / 8] |= (uint8_t)(1u << (id % 8));
		r->bias_ids[k] = (int32_t)id;
		r->bias[k++] = (float)it->valuedouble;
	}
	free(named);
	r->gopts.sample.bias_ids = r->bias_ids;
	r->gopts.sample.bias = r->bias;
	r->gopts.sample.n_bias = rc ? 0 : k;
	return rc;
}

/* Chat: logprobs (bool) + top_logprobs (0..20); completions: logprobs (the
 * number of top ids, 0..20). */
static int parse_logprobs(const cJSON *b, struct srv_req *r, struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "logprobs");
	int64_t top = 0;
	if (r->kind == SRV_CHAT) {
		bool on = false;
		if (get_bool(b, "logprobs", &on, e) ||
		    get_int(b, "top_logprobs", 0, LYNN_MAX_TOP_LOGPROBS, &top, e))
			return -1;
		if (top && !on)
			return srv_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
		r->gopts.logprobs = on;
	} else if (v && !cJSON_IsNull(v)) {
		if (get_int(b, "logprobs", 0, LYNN_MAX_TOP_LOGPROBS, &top, e))
			return -1;
		r->gopts.logprobs = true;
	}
	r->gopts.top_logprobs = (int)top;
	return 0;
}

/* Sampling, length, stop and streaming fields, common to both endpoints. */
static int parse_common(struct srv *s, const cJSON *b, struct srv_req *r, int64_t def_max,
			struct srv_error *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "model");
	double temp = s->def.temperature, top_p = s->def.top_p, min_p = s->def.min_p;
	double rep = s->def.repetition_penalty, presence = 0, frequency = 0;
	int64_t top_k = s->def.top_k, seed = -1, max = def_max;
	const cJSON *so;

	r->gopts.skip_special = true; /* as vLLM: special tokens stay out of the text */
	if (v && !cJSON_IsNull(v)) {
		if (!cJSON_IsString(v))
			return srv_fail(e, 400, "model", "'model' must be a string");
		if (strcmp(v->valuestring, s->model_name))
			return srv_fail(e, 404, "model", "the model '%.200s' does not exist (this server serves '%.200s')",
					v->valuestring, s->model_name);
	}
	if (refuse_unsupported(b, e) || get_num(b, "temperature", 0, 2, &temp, e) ||
	    get_num(b, "top_p", 0, 1, &top_p, e) || get_num(b, "min_p", 0, 1, &min_p, e) ||
	    get_int(b, "top_k", -1, 1 << 30, &top_k, e) ||
	    get_num(b, "presence_penalty", -2, 2, &presence, e) ||
	    get_num(b, "frequency_penalty", -2, 2, &frequency, e) ||
	    get_num(b, "repetition_penalty", 0, 1e30, &rep, e) ||
	    get_int(b, "seed", -9.2e18, 9.2e18, &seed, e) || get_int(b, "max_tokens", 1, 1 << 30, &max, e) ||
	    get_int(b, "max_completion_tokens", 1, 1 << 30, &max, e) ||
	    get_bool(b, "stream", &r->stream, e) || get_bool(b, "ignore_eos", &r->gopts.ignore_eos, e) ||
	    get_bool(b, "skip_special_tokens", &r->gopts.skip_special, e) ||
	    parse_stop(b, r, e))
		return -1;
	if (top_p <= 0)
		return srv_fail(e, 400, "top_p", "'top_p' must be in (0, 1]");
	if (min_p >= 1)
		return srv_fail(e, 400, "min_p", "'min_p' must be in [0, 1)");
	if (rep <= 0) /* vLLM's rule; 1 is off */
		return srv_fail(e, 400, "repetition_penalty", "'repetition_penalty' must be > 0");
	so = cJSON_GetObjectItemCaseSensitive(b, "stream_options");
	if (so && !cJSON_IsNull(so)) {
		if (!r->stream)
			return srv_fail(e, 400, "stream_options", "'stream_options' is only allowed with stream: true");
		if (!cJSON_IsObject(so))
			return srv_fail(e, 400, "stream_options", "'stream_options' must be an object");
		if (get_bool(so, "include_usage", &r->include_usage, e))
			return -1;
	}
	if (parse_logprobs(b, r, e))
		return -1;
	int64_t n = 1;
	if (get_int(b, "n", 1, SRV_MAX_CHOICES, &n, e))
		return -1;
	r->n_choices = (int)n;
	lynn_sample_params_init(&r->gopts.sample);
	r->gopts.sample.temperature = (float)temp;
	r->gopts.sample.top_p = (float)top_p;
	r->gopts.sample.min_p = (float)min_p;
	r->gopts.sample.top_k = top_k < 0 ? 0 : (int)top_k;
	r->gopts.sample.repetition_penalty = (float)rep;
	r->gopts.sample.presence_penalty = (float)presence;
	r->gopts.sample.frequency_penalty = (float)frequency;
	if (parse_logit_bias(s, b, r, e))
		return -1;
	if (seed >= 0 || cJSON_GetObjectItemCaseSensitive(b, "seed"))
		r->gopts.sample.seed = (uint64_t)seed;
	else if (getrandom(&r->gopts.sample.seed, sizeof r->gopts.sample.seed, 0) < 0)
		r->gopts.sample.seed = (uint64_t)time(NULL);
	r->gopts.max_tokens = (int)max;
	r->gopts.stop = (const char *const *)r->stop;
	r->gopts.n_stop = r->n_stop;
	return 0;
}

/* The prompt fits the context; max_tokens is cut to what is left. */
static int fit_context(struct srv *s, struct srv_req *r, struct srv_error *e)
{
	const int64_t n = (int64_t)r->prompt.n, ctx = s->o.ctx_size;
	if (n == 0)
		return srv_fail(e, 400, "prompt", "the prompt is empty");
	if (n >= ctx) {
		srv_fail(e, 400, NULL, "the request's prompt has %lld tokens, at least the context size %lld",
			 (long long)n, (long long)ctx);
		e->type = "exceed_context_size_error";
		e->n_prompt_tokens = n;
		e->n_ctx = ctx;
		return -1;
	}
	if (r->gopts.max_tokens > ctx - n)
		r->gopts.max_tokens = (int)(ctx - n);
	return 0;
}

static int check_messages(const cJSON *b, struct srv_error *e)
{
	static const char *const roles[] = { "system", "developer", "user", "assistant", "tool" };
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages"), *m;
	int i = 0;
	if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
		return srv_fail(e, 400, "messages", "'messages' must be a non-empty list of messages");
	cJSON_ArrayForEach(m, msgs) {
		const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
		const cJSON *c = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
		bool known = false;
		if (!cJSON_IsString(role))
			return srv_fail(e, 400, "messages", "messages[%d] has no 'role' string", i);
		for (size_t k = 0; k < sizeof roles / sizeof *roles; k++)
			known |= !strcmp(role->valuestring, roles[k]);
		if (!known)
			return srv_fail(e, 400, "messages", "messages[%d]: unknown role '%.40s'", i,
					role->valuestring);
		if (c && !cJSON_IsNull(c) && !cJSON_IsString(c) && !cJSON_IsArray(c))
			return srv_fail(e, 400, "messages",
					"messages[%d].content must be a string or a list of parts", i);
		if (cJSON_IsArray(c)) {
			const cJSON *p;
			cJSON_ArrayForEach(p, c) {
				const cJSON *t = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "type") : NULL;
				if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") ||
				    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "text")))
					return srv_fail(e, 400, "messages",
							"messages[%d].content: only {\"type\": \"text\", \"text\": …} parts are supported",
							i);
			}
		}
		i++;
	}
	return 0;
}

static int parse_tools(const cJSON *b, struct srv_req *r, struct srv_error *e)
{
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
	const cJSON *choice = cJSON_GetObjectItemCaseSensitive(b, "tool_choice"), *t;
	if (tools && !cJSON_IsNull(tools)) {
		if (!cJSON_IsArray(tools))
			return srv_fail(e, 400, "tools", "'tools' must be a list");
		cJSON_ArrayForEach(t, tools) {
			const cJSON *f = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL;
			if (!cJSON_IsObject(f) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")))
				return srv_fail(e, 400, "tools",
						"each tool must be {\"type\": \"function\", \"function\": {\"name\": …}}");
		}
	}
	if (choice && !cJSON_IsNull(choice)) {
		if (!cJSON_IsString(choice) ||
		    (strcmp(choice->valuestring, "auto") && strcmp(choice->valuestring, "none")))
			return srv_fail(e, 400, "tool_choice",
					"tool_choice must be \"auto\" or \"none\": \"required\" and named "
					"functions need constrained decoding, which lynn serve does not do");
	}
	r->parse.no_tools = cJSON_IsString(choice) && !strcmp(choice->valuestring, "none");
	if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0 && !r->parse.no_tools) {
		if (!(r->tools_json = cJSON_PrintUnformatted(tools)))
			return srv_fail(e, 500, NULL, "out of memory");
		r->parse.tools_json = r->tools_json;
	}
	return 0;
}

static int encode(struct srv *s, const char *text, size_t len, struct srv_req *r,
		  struct srv_error *e)
{
	struct lynn_err err = { 0 };
	if (lynn_tok_encode(s->tok, text, len, 0, &r->prompt, &err))
		return srv_fail(e, 400, "prompt", "cannot tokenize the prompt: %s", err.msg);
	return 0;
}

int srv_render(struct srv *s, cJSON *b, const char *body, size_t len, char **prompt, size_t *plen,
	       struct srv_error *e)
{
	struct lynn_err err = { 0 };
	cJSON *m;
	char *alias = NULL;
	bool aliased = false;
	int rc;
	if (!s->tmpl)
		return srv_fail(e, 400, "messages", "the model has no chat template: use /v1/completions");
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(b, "messages")) {
		cJSON *rs = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "reasoning") : NULL;
		if (cJSON_IsString(rs) && !cJSON_GetObjectItemCaseSensitive(m, "reasoning_content")) {
			cJSON_AddItemToObject(m, "reasoning_content", cJSON_Duplicate(rs, false));
			aliased = true; /* re-printed only when edited: numbers keep their spelling */
		}
	}
	/* tool_choice "none": the model is not shown the tools (and its text is
	 * not searched for calls: parse.no_tools) */
	const cJSON *choice = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
	if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none") &&
	    cJSON_GetObjectItemCaseSensitive(b, "tools")) {
		cJSON_DeleteItemFromObjectCaseSensitive(b, "tools");
		aliased = true;
	}
	if (aliased && !(alias = cJSON_PrintUnformatted(b)))
		return srv_fail(e, 500, NULL, "out of memory");
	rc = lynn_chat_render_request(s->tmpl, alias ? alias : body, alias ? strlen(alias) : len, -1, prompt,
				      plen, &err);
	if (alias)
		cJSON_free(alias);
	if (rc)
		return srv_fail(e, 400, "messages", "the chat template failed: %s", err.msg);
	return 0;
}

/* How many tokens of r's prompt the prompt of body b (as it is now)
 * agrees with; 0 when the template fails on it. */
static size_t agree(struct srv *s, cJSON *b, const struct srv_req *r)
{
	struct srv_error e = { 0 };
	struct lynn_tok_ids ids = { 0 };
	struct lynn_err err = { 0 };
	char *body = cJSON_PrintUnformatted(b), *prompt = NULL;
	size_t plen = 0, n = 0;
	if (body && !srv_render(s, b, body, strlen(body), &prompt, &plen, &e) &&
	    !lynn_tok_encode(s->tok, prompt, plen, 0, &ids, &err))
		while (n < ids.n && n < r->prompt.n && ids.ids[n] == r->prompt.ids[n])
			n++;
	lynn_tok_ids_release(&ids);
	free(prompt);
	cJSON_free(body);
	return n;
}

/* With the prefix cache on, a chat request also keeps two states part way
 * into its prompt (a hybrid model's state cannot be cut back to a shorter
 * prefix later), each where the prompt rendered from part of the request,
 * without the generation prompt, stops agreeing with the whole one:
 * - the leading system messages (and the tools) with an empty user
 *   message: other conversations with the same system prompt begin
 *   there;
 * - every message: the conversation's next request renders the same
 *   messages, then this turn's answer where this prompt has the
 *   generation prompt.
 * b is the request body, edited here. */
static void cache_points(struct srv *s, cJSON *b, struct srv_req *r)
{
	const cJSON *agp = cJSON_GetObjectItemCaseSensitive(b, "add_generation_prompt");
	cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages"), *m, *sys;
	int k = 0;
	if (!s->o.prefix_cache || (agp && !cJSON_IsTrue(agp)))
		return;
	cJSON_DeleteItemFromObjectCaseSensitive(b, "add_generation_prompt");
	if (!cJSON_AddFalseToObject(b, "add_generation_prompt"))
		return;
	r->gopts.cache_at[1] = agree(s, b, r);
	cJSON_ArrayForEach(m, msgs) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer"))
			break;
		k++;
	}
	if ((k == 0 && !cJSON_GetObjectItemCaseSensitive(b, "tools")) || k == cJSON_GetArraySize(msgs) ||
	    !(sys = cJSON_CreateArray()))
		return;
	for (int i = 0; i < k; i++)
		cJSON_AddItemToArray(sys, cJSON_Duplicate(cJSON_GetArrayItem(msgs, i), true));
	/* and an empty user message: templates refuse a conversation without
	 * one, and the prompts part at its content */
	if ((m = cJSON_CreateObject())) {
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", "");
		cJSON_AddItemToArray(sys, m);
	}
	cJSON_ReplaceItemInObjectCaseSensitive(b, "messages", sys);
	const size_t n = agree(s, b, r);
	if (n < r->gopts.cache_at[1])
		r->gopts.cache_at[0] = n;
}

static int parse_chat(struct srv *s, cJSON *b, const char *body, size_t len, struct srv_req *r,
		      struct srv_error *e)
{
	char *prompt = NULL;
	size_t plen = 0;
	int rc;
	if (!s->tmpl)
		return srv_fail(e, 400, "messages", "the model has no chat template: use /v1/completions");
	if (check_messages(b, e) || parse_tools(b, r, e) || parse_common(s, b, r, INT32_MAX, e) ||
	    srv_render(s, b, body, len, &prompt, &plen, e))
		return -1;
	r->parse.in_think = lynn_chat_prompt_in_think(prompt, plen);
	rc = encode(s, prompt, plen, r, e);
	free(prompt);
	if (!rc)
		cache_points(s, b, r);
	return rc;
}

static int parse_completion(struct srv *s, const cJSON *b, struct srv_req *r, struct srv_error *e)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
	if (parse_common(s, b, r, 16, e))
		return -1;
	if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
		p = cJSON_GetArrayItem(p, 0);
	if (cJSON_IsString(p))
		return encode(s, p->valuestring, strlen(p->valuestring), r, e);
	if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) { /* token ids */
		const int n_vocab = lynn_tok_n_vocab(s->tok);
		const cJSON *it;
		int i = 0;
		if (!(r->prompt.ids = malloc((size_t)cJSON_GetArraySize(p) * sizeof *r->prompt.ids)))
			return srv_fail(e, 500, NULL, "out of memory");
		cJSON_ArrayForEach(it, p) {
			if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
			    it->valuedouble < 0 || it->valuedouble >= n_vocab)
				return srv_fail(e, 400, "prompt",
						"prompt[%d]: a token id list takes integers in [0, %d)", i, n_vocab);
			r->prompt.ids[r->prompt.n++] = (int32_t)it->valuedouble;
			i++;
		}
		r->prompt.cap = r->prompt.n;
		return 0;
	}
	return srv_fail(e, 400, "prompt", "'prompt' must be a string, a list of one string or a list of token ids");
}

struct srv_req *srv_req_parse(struct srv *s, enum srv_kind kind, const char *body, size_t len,
			      struct srv_error *e)
{
	struct lynn_err err = { 0 };
	cJSON *b = lynn_json_parse("the request body", body, len, &err);
	struct srv_req *r = NULL;
	int rc = -1;
	if (!b) {
		srv_fail(e, 400, NULL, "the request body is not valid JSON: %s", err.msg);
		return NULL;
	}
	if (!cJSON_IsObject(b)) {
		srv_fail(e, 400, NULL, "the request body must be a JSON object");
		goto out;
	}
	if (!(r = calloc(1, sizeof *r))) {
		srv_fail(e, 500, NULL, "out of memory");
		goto out;
	}
	pthread_cond_init(&r->cv, NULL);
	r->kind = kind;
	r->srv = s;
	r->created = (int64_t)time(NULL);
	random_id(r->id, sizeof r->id, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
	rc = kind == SRV_CHAT ? parse_chat(s, b, body, len, r, e) : parse_completion(s, b, r, e);
	if (!rc)
		rc = fit_context(s, r, e);
	if (!rc && r->n_choices > 1 && s->o.prefix_cache) /* the choices after the first start there */
		r->gopts.cache_at[2] = r->prompt.n - 1;
out:
	cJSON_Delete(b);
	if (rc) {
		srv_req_free(r);
		return NULL;
	}
	return r;
}

/* ---- responses ---- */

const char *srv_finish_reason(const struct srv_req *r, bool has_tool_calls)
{
	if (has_tool_calls)
		return "tool_calls";
	return r->res.finish == LYNN_GEN_LENGTH ? "length" : "stop";
}

/* A token as text: its bytes when they are whole UTF-8, else OpenAI's
 * "bytes:\\xNN…" spelling. */
static char *token_text(const struct lynn_tok *tok, int32_t id, const uint8_t **bytes, size_t *len)
{
	*bytes = lynn_tok_token_bytes(tok, id, len);
	if (!*bytes)
		*len = 0;
	if (*len && lynn_utf8_check(*bytes, *len) == *len && !memchr(*bytes, 0, *len))
		return strndup((const char *)*bytes, *len);
	char *t = malloc(6 + 4 * *len + 1);
	if (t) {
		size_t k = (size_t)sprintf(t, "bytes:");
		for (size_t i = 0; i < *len; i++)
			k += (size_t)sprintf(t + k, "\\x%02x", (*bytes)[i]);
	}
	return t;
}

/* {"token", "logprob", "bytes"} */
static cJSON *token_logprob(const struct lynn_tok *tok, int32_t id, float lp)
{
	const uint8_t *bytes;
	size_t len;
	char *t = token_text(tok, id, &bytes, &len);
	cJSON *o = cJSON_CreateObject(), *b;
	cJSON_AddStringToObject(o, "token", t ? t : "");
	cJSON_AddNumberToObject(o, "logprob", lp);
	b = cJSON_AddArrayToObject(o, "bytes");
	for (size_t i = 0; i < len; i++)
		cJSON_AddItemToArray(b, cJSON_CreateNumber(bytes[i]));
	free(t);
	return o;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]} for n
 * tokens. */
static cJSON *chat_logprobs(struct srv *s, const int32_t *ids, const struct lynn_gen_logprob *lps,
			    size_t n)
{
	cJSON *o = cJSON_CreateObject(), *c = cJSON_AddArrayToObject(o, "content");
	for (size_t i = 0; i < n; i++) {
		cJSON *t = token_logprob(s->tok, ids[i], lps[i].logprob);
		cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
		for (int k = 0; k < lps[i].n_top; k++)
			cJSON_AddItemToArray(top, token_logprob(s->tok, lps[i].top_ids[k], lps[i].top_logprobs[k]));
		cJSON_AddItemToArray(c, t);
	}
	return o;
}

/* Completions (the legacy form): tokens, token_logprobs, top_logprobs (one
 * {token: logprob} object per position), text_offset (from *offset, which
 * advances by the tokens' bytes). */
static cJSON *completion_logprobs(struct srv *s, const int32_t *ids, const struct lynn_gen_logprob *lps,
				  size_t n, size_t *offset)
{
	cJSON *o = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(o, "tokens");
	cJSON *lpa = cJSON_AddArrayToObject(o, "token_logprobs"), *tops = cJSON_AddArrayToObject(o, "top_logprobs");
	cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
	for (size_t i = 0; i < n; i++) {
		const uint8_t *bytes;
		size_t len;
		char *t = token_text(s->tok, ids[i], &bytes, &len);
		cJSON_AddItemToArray(toks, cJSON_CreateString(t ? t : ""));
		cJSON_AddItemToArray(lpa, cJSON_CreateNumber(lps[i].logprob));
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
		*offset += len;
		free(t);
		cJSON *top = cJSON_CreateObject();
		for (int k = 0; k < lps[i].n_top; k++) {
			char *tt = token_text(s->tok, lps[i].top_ids[k], &bytes, &len);
			if (tt && !cJSON_GetObjectItemCaseSensitive(top, tt))
				cJSON_AddNumberToObject(top, tt, lps[i].top_logprobs[k]);
			free(tt);
		}
		cJSON_AddItemToArray(tops, top);
	}
	return o;
}

/* A finished request's logprobs, or null when not asked for. */
static cJSON *response_logprobs(struct srv *s, const struct srv_req *r)
{
	const size_t n = lynn_gen_n_text_ids(&r->res); /* a final end-of-generation id has no text */
	size_t offset = 0;
	if (!r->res.logprobs)
		return cJSON_CreateNull();
	return r->kind == SRV_CHAT ? chat_logprobs(s, r->res.ids.ids, r->res.logprobs, n)
				   : completion_logprobs(s, r->res.ids.ids, r->res.logprobs, n, &offset);
}

static cJSON *response_new(struct srv *s, const struct srv_req *r, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	char fp[64];
	cJSON_AddStringToObject(o, "id", r->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)r->created);
	cJSON_AddStringToObject(o, "model", s->model_name);
	snprintf(fp, sizeof fp, "lynn-%s-%s", LYNN_VERSION, lynn_git_hash());
	cJSON_AddStringToObject(o, "system_fingerprint", fp);
	return o;
}

cJSON *srv_chunk_new(struct srv *s, const struct srv_req *r)
{
	return response_new(s, r, r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
}

cJSON *srv_usage(size_t prompt_tokens, size_t completion_tokens, size_t cached_tokens)
{
	cJSON *u = cJSON_CreateObject(), *d;
	cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt_tokens);
	cJSON_AddNumberToObject(u, "completion_tokens", (double)completion_tokens);
	cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt_tokens + completion_tokens));
	if ((d = cJSON_AddObjectToObject(u, "prompt_tokens_details")))
		cJSON_AddNumberToObject(d, "cached_tokens", (double)cached_tokens);
	return u;
}

/* The usage of a body's n choices: the prompt once (and its cached tokens,
 * the first choice's), their completions summed */
static cJSON *choices_usage(struct srv_req *const *r, int n)
{
	size_t completion = 0;
	for (int i = 0; i < n; i++)
		completion += r[i]->res.ids.n;
	return srv_usage(r[0]->prompt.n, completion, r[0]->res.n_cached);
}

static char *finish_json(cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

/* Choice i of a chat response: the text parsed into content, reasoning and
 * tool calls. NULL when out of memory. */
static cJSON *chat_choice(struct srv *s, struct srv_req *r, int i)
{
	struct lynn_chat_msg msg = { 0 };
	struct lynn_err err = { 0 };
	cJSON *c, *m;
	if (lynn_chat_parse(r->res.text.data ? r->res.text.data : "", r->res.text.len, &r->parse, &msg,
			    &err))
		return NULL;
	c = cJSON_CreateObject();
	cJSON_AddNumberToObject(c, "index", i);
	m = cJSON_AddObjectToObject(c, "message");
	cJSON_AddStringToObject(m, "role", "assistant");
	if (msg.n_tool_calls && !(msg.content && msg.content[0]))
		cJSON_AddNullToObject(m, "content"); /* as OpenAI: a call alone has no content */
	else
		cJSON_AddStringToObject(m, "content", msg.content ? msg.content : "");
	if (msg.reasoning_content && msg.reasoning_content[0])
		cJSON_AddStringToObject(m, "reasoning_content", msg.reasoning_content);
	if (msg.n_tool_calls) {
		cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
		for (size_t k = 0; k < msg.n_tool_calls; k++) {
			cJSON *t = cJSON_CreateObject(), *f;
			char id[40];
			random_id(id, sizeof id, "call_");
			cJSON_AddStringToObject(t, "id", id);
			cJSON_AddStringToObject(t, "type", "function");
			f = cJSON_AddObjectToObject(t, "function");
			cJSON_AddStringToObject(f, "name", msg.tool_calls[k].name);
			cJSON_AddStringToObject(f, "arguments", msg.tool_calls[k].arguments);
			cJSON_AddItemToArray(tc, t);
		}
	}
	cJSON_AddItemToObject(c, "logprobs", response_logprobs(s, r));
	cJSON_AddStringToObject(c, "finish_reason", srv_finish_reason(r, msg.n_tool_calls > 0));
	lynn_chat_msg_release(&msg);
	return c;
}

static cJSON *completion_choice(struct srv *s, struct srv_req *r, int i)
{
	cJSON *c = cJSON_CreateObject();
	char *t = strndup(r->res.text.data ? r->res.text.data : "", r->res.text.len);
	cJSON_AddNumberToObject(c, "index", i);
	cJSON_AddStringToObject(c, "text", t ? t : "");
	free(t);
	cJSON_AddItemToObject(c, "logprobs", response_logprobs(s, r));
	cJSON_AddStringToObject(c, "finish_reason", srv_finish_reason(r, false));
	return c;
}

char *srv_response(struct srv *s, struct srv_req *const *r, int n)
{
	cJSON *o = response_new(s, r[0], r[0]->kind == SRV_CHAT ? "chat.completion" : "text_completion");
	cJSON *ch = cJSON_AddArrayToObject(o, "choices");
	for (int i = 0; i < n; i++) {
		cJSON *c = r[i]->kind == SRV_CHAT ? chat_choice(s, r[i], i) : completion_choice(s, r[i], i);
		if (!c) {
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToArray(ch, c);
	}
	cJSON_AddItemToObject(o, "usage", choices_usage(r, n));
	return finish_json(o);
}

struct srv_req *srv_req_clone(const struct srv_req *r, uint64_t seed)
{
	struct srv_req *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_cond_init(&c->cv, NULL);
	c->kind = r->kind;
	memcpy(c->id, r->id, sizeof c->id);
	c->created = r->created;
	c->stream = r->stream;
	c->include_usage = r->include_usage;
	c->n_choices = 1;
	c->grouped = r->grouped;
	c->srv = r->srv;
	c->parse = r->parse;
	c->gopts = r->gopts;
	c->gopts.sample.seed = seed;
	c->parse.tools_json = NULL;
	if (r->tools_json && !(c->tools_json = strdup(r->tools_json)))
		goto fail;
	c->parse.tools_json = c->tools_json;
	if (r->n_stop && !(c->stop = calloc((size_t)r->n_stop, sizeof *c->stop)))
		goto fail;
	for (; c->n_stop < r->n_stop; c->n_stop++)
		if (!(c->stop[c->n_stop] = strdup(r->stop[c->n_stop])))
			goto fail;
	c->gopts.stop = (const char *const *)c->stop;
	if (r->gopts.sample.n_bias) {
		const size_t nb = (size_t)r->gopts.sample.n_bias;
		if (!(c->bias_ids = malloc(nb * sizeof *c->bias_ids)) || !(c->bias = malloc(nb * sizeof *c->bias)))
			goto fail;
		memcpy(c->bias_ids, r->bias_ids, nb * sizeof *c->bias_ids);
		memcpy(c->bias, r->bias, nb * sizeof *c->bias);
		c->gopts.sample.bias_ids = c->bias_ids;
		c->gopts.sample.bias = c->bias;
	}
	if (!(c->prompt.ids = malloc(r->prompt.n * sizeof *c->prompt.ids)))
		goto fail;
	memcpy(c->prompt.ids, r->prompt.ids, r->prompt.n * sizeof *c->prompt.ids);
	c->prompt.n = c->prompt.cap = r->prompt.n;
	return c;
fail:
	srv_req_free(c);
	return NULL;
}

/* ===== streamed responses: server-sent events ===== */


static void sse(struct srv_events *st, cJSON *o)
{
	char *j = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (j)
		lynn_buf_printf(&st->out, "data: %s\n\n", j);
	free(j);
}

/* A chunk with one choice whose delta (chat) or text (completions) is set
 * by the caller; finish_reason null unless given. */
static cJSON *chunk(struct srv_events *st, cJSON **delta, const char *finish)
{
	cJSON *o = srv_chunk_new(st->s, st->r), *ch = cJSON_AddArrayToObject(o, "choices");
	cJSON *c = cJSON_CreateObject();
	cJSON_AddItemToArray(ch, c);
	cJSON_AddNumberToObject(c, "index", st->index);
	if (st->r->kind == SRV_CHAT)
		*delta = cJSON_AddObjectToObject(c, "delta");
	else
		*delta = c;
	cJSON_AddNullToObject(c, "logprobs");
	if (finish)
		cJSON_AddStringToObject(c, "finish_reason", finish);
	else
		cJSON_AddNullToObject(c, "finish_reason");
	return o;
}

static void emit_delta(struct srv_events *st, const struct lynn_chat_msg *d)
{
	cJSON *delta, *o;
	if (d->reasoning_content && d->reasoning_content[0]) {
		o = chunk(st, &delta, NULL);
		cJSON_AddStringToObject(delta, "reasoning_content", d->reasoning_content);
		sse(st, o);
	}
	if (d->content && d->content[0]) {
		o = chunk(st, &delta, NULL);
		cJSON_AddStringToObject(delta, "content", d->content);
		sse(st, o);
	}
	for (size_t i = 0; i < d->n_tool_calls; i++) {
		cJSON *tc, *t, *f;
		char id[40];
		o = chunk(st, &delta, NULL);
		tc = cJSON_AddArrayToObject(delta, "tool_calls");
		t = cJSON_CreateObject();
		cJSON_AddItemToArray(tc, t);
		cJSON_AddNumberToObject(t, "index", st->n_calls++);
		random_id(id, sizeof id, "call_");
		cJSON_AddStringToObject(t, "id", id);
		cJSON_AddStringToObject(t, "type", "function");
		f = cJSON_AddObjectToObject(t, "function");
		cJSON_AddStringToObject(f, "name", d->tool_calls[i].name);
		cJSON_AddStringToObject(f, "arguments", d->tool_calls[i].arguments);
		sse(st, o);
	}
}

/* The text gathered (and, at the end, the finish) -> events in st->out. */
static void events_flush(struct srv_events *st, bool end)
{
	struct lynn_err err = { 0 };
	struct lynn_chat_msg d = { 0 };
	cJSON *delta, *o;
	if (st->r->kind == SRV_COMPLETION) {
		if (st->text.len) {
			o = chunk(st, &delta, NULL);
			cJSON_AddStringToObject(delta, "text", st->text.data);
			sse(st, o);
		}
	} else {
		if ((st->text.len && lynn_chat_stream_feed(st->cs, st->text.data, st->text.len, &d, &err) == 0))
			emit_delta(st, &d);
		lynn_chat_msg_release(&d);
		memset(&d, 0, sizeof d);
		if (end && lynn_chat_stream_finish(st->cs, &d, &err) == 0)
			emit_delta(st, &d);
		lynn_chat_msg_release(&d);
	}
	lynn_buf_reset(&st->text);
	if (!end)
		return;
	if (st->r->state == SRV_FAILED) {
		char *j = srv_error_json(&st->r->err);
		lynn_buf_printf(&st->out, "data: %s\n\ndata: [DONE]\n\n", j ? j : "{}");
		free(j);
		return;
	}
	o = chunk(st, &delta, srv_finish_reason(st->r, st->n_calls > 0));
	if (st->r->kind == SRV_COMPLETION)
		cJSON_AddStringToObject(delta, "text", "");
	sse(st, o);
}

int srv_events_init(struct srv_events *st, struct srv *s, struct srv_req *r, int index, struct lynn_err *err)
{
	memset(st, 0, sizeof *st);
	st->s = s;
	st->r = r;
	st->index = index;
	if (r->kind == SRV_CHAT) {
		cJSON *delta, *o;
		if (!(st->cs = lynn_chat_stream_create(&r->parse, err)))
			return err && err->code ? err->code : -LYNN_ENOMEM;
		o = chunk(st, &delta, NULL);
		cJSON_AddStringToObject(delta, "role", "assistant");
		cJSON_AddNullToObject(delta, "content");
		sse(st, o);
	}
	return 0;
}

void srv_events_text(struct srv_events *st, const char *text, size_t len)
{
	lynn_buf_append(&st->text, text, len);
	events_flush(st, false);
}

void srv_lps_release(struct srv_lps *l)
{
	free(l->ids);
	free(l->lp);
	memset(l, 0, sizeof *l);
}

void srv_events_logprobs(struct srv_events *st, const struct srv_lps *l)
{
	cJSON *delta, *o, *lp;
	if (!l->n)
		return;
	o = chunk(st, &delta, NULL);
	if (st->r->kind == SRV_CHAT) {
		lp = chat_logprobs(st->s, l->ids, l->lp, l->n);
	} else {
		cJSON_AddStringToObject(delta, "text", "");
		lp = completion_logprobs(st->s, l->ids, l->lp, l->n, &st->lp_offset);
	}
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "logprobs",
					       lp);
	sse(st, o);
}

void srv_events_end(struct srv_events *st)
{
	events_flush(st, true);
}

void srv_events_close(struct srv_events *st, struct srv_req *const *r, int n)
{
	if (r[0]->include_usage) {
		cJSON *o = srv_chunk_new(st->s, r[0]);
		cJSON_AddArrayToObject(o, "choices");
		cJSON_AddItemToObject(o, "usage", choices_usage(r, n));
		sse(st, o);
	}
	lynn_buf_puts(&st->out, "data: [DONE]\n\n");
}

void srv_events_release(struct srv_events *st)
{
	lynn_chat_stream_free(st->cs);
	lynn_buf_release(&st->out);
	lynn_buf_release(&st->text);
}
